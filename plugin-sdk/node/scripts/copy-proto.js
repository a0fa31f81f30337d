#!/usr/bin/env node
// prepack: copies the contract's .proto files from the repository (../../proto) into
// the package, so a packed or installed package finds them without the repository;
// postpack (--clean) removes the copy again.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.join(__dirname, '..');
const repoProto = path.join(pkg, '..', '..', 'proto');
const files = ['switchyard/plugin/v1/plugin.proto', 'grpc/health/v1/health.proto'];
if (process.argv[2] === '--clean') {
  // postpack: the repository's proto/ stays the only copy in the working tree.
  fs.rmSync(path.join(pkg, 'proto'), { recursive: true, force: true });
  process.exit(0);
}
for (const f of files) {
  const from = path.join(repoProto, f);
  const to = path.join(pkg, 'proto', f);
  if (!fs.existsSync(from)) {
    console.error(`prepack: ${from} not found: pack the package from its place in the Switchyard repository (plugin-sdk/node)`);
    process.exit(1);
  }
  fs.mkdirSync(path.dirname(to), { recursive: true });
  fs.copyFileSync(from, to);
}
console.error(`prepack: copied ${files.length} .proto files into ${path.join(pkg, 'proto')}`);
