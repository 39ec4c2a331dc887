// Package juicefs tests sidecache with JuiceFS's own metadata engine
// (github.com/juicedata/juicefs/pkg/meta, v1.2.0, which this module pins):
//
//   - scripts/run-juicefs-suite.sh builds that package's own test binary and
//     runs JuiceFS's Redis tests (TestRedisClient, TestLoadDump's Redis case)
//     through sidecache;
//   - TestTwoMounts (mounts_test.go) runs three JuiceFS clients of one
//     volume, two through sidecaches of their own (harness_test.go);
//   - jfsbench is the driver of bench/juicefs_engine.sh.
//
// JuiceFS's go.mod replaces some of its dependencies with forks; replace
// directives of a dependency do not apply to the module that requires it,
// so go.mod repeats the ones the metadata engine builds with.
package juicefs

import _ "github.com/juicedata/juicefs/pkg/meta"
