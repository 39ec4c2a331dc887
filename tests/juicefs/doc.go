// Package juicefs holds no code of its own: it names JuiceFS's metadata
// engine (github.com/juicedata/juicefs/pkg/meta, v1.2.0) as a dependency so
// that scripts/run-juicefs-suite.sh can build that package's own test binary
// and run JuiceFS's Redis tests (TestRedisClient, TestLoadDump's Redis case)
// through sidecache. JuiceFS's go.mod replaces some of its dependencies with
// forks; replace directives of a dependency do not apply to the module that
// requires it, so go.mod repeats the ones the metadata engine builds with.
package juicefs

import _ "github.com/juicedata/juicefs/pkg/meta"
