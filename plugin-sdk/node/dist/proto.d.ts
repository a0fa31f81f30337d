import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
/** How messages are delivered to the SDK (and the types in types.ts): field names in
 * lowerCamelCase, 64-bit integers as JavaScript numbers (scores, generations, ids,
 * microseconds and quantities; exact up to 2^53), enums as their names, every field
 * present with its default, oneofs named by a virtual field (`kind`). */
export declare const LOADER_OPTIONS: protoLoader.Options;
/** Where the .proto files are: the package's own `proto/` (copied by `prepack` into
 * a packed or installed package), else the repository's `proto/` two levels up
 * (the package is plugin-sdk/node in the Switchyard repository).
 * SWITCHYARD_PROTO_DIR overrides both. */
export declare function protoDir(): string;
export interface Loaded {
    plugin: grpc.ServiceDefinition;
    health: grpc.ServiceDefinition;
    /** Client constructors (for the probe and the tests). */
    PluginClient: grpc.ServiceClientConstructor;
    HealthClient: grpc.ServiceClientConstructor;
}
export declare function load(): Loaded;
/** Field 1 (varint) of a message when it comes first, as the encoders write it. */
export declare function readField1(buf: Buffer): number;
