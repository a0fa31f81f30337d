import type { Cycle, Plugin } from './plugin.js';
import type { LabelScores } from './types.js';
/** `p` served as preScore and score when it scores by a node label (checked first),
 * else `p` itself. The wrapper inherits every other property from `p`. */
export declare function labelScored(p: Plugin): Plugin;
/** The table a label-scoring plugin's PreScore kept, for its reply (values sorted:
 * the same table is the same message). */
export declare function labelScoresReply(cycle: Cycle): LabelScores | undefined;
