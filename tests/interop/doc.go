// Package interop runs real client libraries (go-redis v9, the client JuiceFS
// uses) against the sidecache proxy, which forwards to a real redis-server.
// See interop_test.go and scripts/run-interop.sh.
package interop
