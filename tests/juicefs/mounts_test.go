package juicefs

// TestTwoMounts: three clients of one JuiceFS volume, each JuiceFS 1.2.0's
// own metadata engine (pkg/meta), as three mounts would hold them: A through
// one sidecache, B through another, D directly on Redis. JuiceFS's own tests
// (TestRedisClient) use one client; this one checks what a cache in front of
// each mount must get right between mounts. Both sidecaches get Redis's
// invalidations JUICEFS_MOUNTS_INV_DELAY (default 50ms) late (their
// invalidation connections go through a relay that holds them back), so
// that what a mount shows of its own changes is sidecache's doing, not the
// invalidation's arriving in time:
//
//   - read-your-writes (C1): right after each of A's changes (rename, unlink,
//     create of a name A had looked up as missing, write, chmod, move), A's
//     lookup shows it, although A's cache held the old answer (bcast: in
//     the per-read modes lookups go to Redis, reads of the parts fill); so do B's
//     lookups after B's own creates and its rm -r;
//   - bounded staleness (C10): B shows A's changes, and A and B show changes
//     made directly on Redis (D's chmods, unlink, rename), within
//     JUICEFS_MOUNTS_GRACE (default 2s); D shows everything at once;
//   - transactions: A and B create the same 40 names at the same moments
//     (O_EXCL): exactly one create of each name succeeds, the other gets
//     EEXIST, and every mount finds the winner; each makes 20
//     subdirectories of one directory at the same moments: its link count
//     counts them all;
//   - no hits under WATCH (C2): B's cache holds 20 names as missing; A
//     creates each, and B's create of it right after (before Redis's
//     invalidation reaches B's sidecache) must get EEXIST;
//   - the end state: JuiceFS's fsck (Check, with usage stats) finds the
//     volume consistent with the tree in place once A and B unmount, and
//     again after B removes the tree (rm -r) through fresh mounts.
//
// It runs once per tracking mode (bcast, default, optin), with sidecaches
// of its own. It needs SIDECACHE_BIN (the proxy) and JUICEFS_REDIS
// (host:port of a redis-server it may flush): scripts/run-juicefs-suite.sh
// sets both. Without them it is skipped.

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/juicedata/juicefs/pkg/meta"
	"github.com/redis/go-redis/v9"
)

type mount struct {
	label   string
	url     string
	m       meta.Meta
	mounted bool
}

// node is what the model expects a name to resolve to.
type node struct {
	ino    meta.Ino
	typ    uint8
	mode   uint16
	length uint64
	nlink  uint32
}

func openMount(t *testing.T, label, url string) *mount {
	t.Helper()
	conf := meta.DefaultConf()
	conf.NoBGJob = true // no clean-up jobs racing the checks
	m := meta.NewClient(url, conf)
	// a mount's chunk store takes these; nothing is stored here
	m.OnMsg(meta.DeleteSlice, func(args ...interface{}) error { return nil })
	m.OnMsg(meta.CompactChunk, func(args ...interface{}) error { return nil })
	return &mount{label: label, url: url, m: m}
}

func (mt *mount) start(t *testing.T) {
	t.Helper()
	if _, err := mt.m.Load(true); err != nil {
		t.Fatalf("%s: load: %v", mt.label, err)
	}
	if err := mt.m.NewSession(true); err != nil {
		t.Fatalf("%s: new session: %v", mt.label, err)
	}
	mt.mounted = true
	t.Cleanup(func() { mt.unmount(t) })
}

// unmount ends the session as juicefs umount does: dir stats flushed, the
// files it held open and others had removed deleted.
func (mt *mount) unmount(t *testing.T) {
	t.Helper()
	if !mt.mounted {
		return
	}
	mt.mounted = false
	if err := mt.m.CloseSession(); err != nil {
		t.Errorf("%s: close session: %v", mt.label, err)
	}
	_ = mt.m.Shutdown()
}

var ctx = meta.Background

// lookup resolves name in parent: the node, or the errno.
func (mt *mount) lookup(parent meta.Ino, name string) (node, syscall.Errno) {
	var ino meta.Ino
	var attr meta.Attr
	if st := mt.m.Lookup(ctx, parent, name, &ino, &attr, false); st != 0 {
		return node{}, st
	}
	return node{ino, attr.Typ, attr.Mode, attr.Length, attr.Nlink}, 0
}

// listing is readdir with attributes (JuiceFS's readdirplus: HGETALL of the
// directory, then MGET of its inodes), "." and ".." left out, as name ->
// node.
func (mt *mount) listing(dir meta.Ino) (map[string]node, syscall.Errno) {
	var entries []*meta.Entry
	if st := mt.m.Readdir(ctx, dir, 1, &entries); st != 0 {
		return nil, st
	}
	out := make(map[string]node, len(entries))
	for _, e := range entries {
		n := string(e.Name)
		if n == "." || n == ".." {
			continue
		}
		out[n] = node{e.Inode, e.Attr.Typ, e.Attr.Mode, e.Attr.Length, e.Attr.Nlink}
	}
	return out, 0
}

// model is the directory's expected content: name -> node.
type model map[string]node

// mismatch says how what a mount shows of dir differs from want (empty when
// it does not): every name in want looked up, every name in gone looked up
// as missing, and the readdirplus listing compared whole.
func (mt *mount) mismatch(dir meta.Ino, want model, gone []string) string {
	var diffs []string
	for name, w := range want {
		got, st := mt.lookup(dir, name)
		if st != 0 {
			diffs = append(diffs, fmt.Sprintf("lookup %s: %v, want inode %d", name, st, w.ino))
		} else if got != w {
			diffs = append(diffs, fmt.Sprintf("lookup %s: %+v, want %+v", name, got, w))
		}
	}
	for _, name := range gone {
		if got, st := mt.lookup(dir, name); st != syscall.ENOENT {
			diffs = append(diffs, fmt.Sprintf("lookup %s: %+v %v, want ENOENT", name, got, st))
		}
	}
	list, st := mt.listing(dir)
	if st != 0 {
		diffs = append(diffs, fmt.Sprintf("readdir: %v", st))
	} else {
		for name, w := range want {
			if got, ok := list[name]; !ok {
				diffs = append(diffs, fmt.Sprintf("readdir: %s missing", name))
			} else if got != w {
				diffs = append(diffs, fmt.Sprintf("readdir %s: %+v, want %+v", name, got, w))
			}
		}
		for name := range list {
			if _, ok := want[name]; !ok {
				diffs = append(diffs, fmt.Sprintf("readdir: %s listed, not expected", name))
			}
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 6 {
		diffs = append(diffs[:6], fmt.Sprintf("... %d more", len(diffs)-6))
	}
	return strings.Join(diffs, "; ")
}

// expectNow: the mount shows the model at once (its own writes, or Redis
// itself).
func (mt *mount) expectNow(t *testing.T, what string, dir meta.Ino, want model, gone []string) {
	t.Helper()
	if d := mt.mismatch(dir, want, gone); d != "" {
		t.Fatalf("%s, %s: %s", what, mt.label, d)
	}
}

// expectWithin: the mount shows the model within grace (a change made
// through another mount); how long it took is logged.
func (mt *mount) expectWithin(t *testing.T, what string, dir meta.Ino, want model, gone []string, grace time.Duration) {
	t.Helper()
	start := time.Now()
	for tries := 1; ; tries++ {
		d := mt.mismatch(dir, want, gone)
		if d == "" {
			if tries > 1 {
				t.Logf("%s, %s: shown after %v (%d reads of the directory)", what, mt.label,
					time.Since(start).Round(time.Millisecond), tries)
			}
			return
		}
		if time.Since(start) > grace {
			t.Fatalf("%s, %s: still wrong after %v: %s", what, mt.label, grace, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustOK(t *testing.T, what string, st syscall.Errno) {
	t.Helper()
	if st != 0 {
		t.Fatalf("%s: %v", what, st)
	}
}

// write gives ino length bytes (one slice in chunk 0), as a mount's write
// and flush would.
func (mt *mount) write(t *testing.T, ino meta.Ino, length uint32) {
	t.Helper()
	var id uint64
	mustOK(t, mt.label+": new slice", mt.m.NewSlice(ctx, &id))
	mustOK(t, mt.label+": write", mt.m.Write(ctx, ino, 0, 0, meta.Slice{Id: id, Size: length, Len: length}, time.Now()))
}

// inStep runs step(side, mount, i) for i = 0 .. n-1 on each mount, each in
// a goroutine of its own, all at the same i at the same moment (their
// requests overlap). A step that returns false ends that mount's run (the
// others go on without waiting for it).
func inStep(n int, mounts []*mount, step func(side int, mt *mount, i int) bool) {
	at := make([]sync.WaitGroup, n)
	for i := range at {
		at[i].Add(len(mounts))
	}
	var wg sync.WaitGroup
	for side, mt := range mounts {
		wg.Add(1)
		go func(side int, mt *mount) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				at[i].Done()
				at[i].Wait()
				if !step(side, mt, i) {
					for j := i + 1; j < n; j++ {
						at[j].Done()
					}
					return
				}
			}
		}(side, mt)
	}
	wg.Wait()
}

// expectName: a lookup of name in dir by the mount shows want at once.
func (mt *mount) expectName(t *testing.T, what string, dir meta.Ino, name string, want node) {
	t.Helper()
	if got, st := mt.lookup(dir, name); st != 0 || got != want {
		t.Fatalf("%s, %s: lookup %s: %+v %v, want %+v", what, mt.label, name, got, st, want)
	}
}

// expectGone: a lookup of name in dir by the mount finds nothing, at once.
func (mt *mount) expectGone(t *testing.T, what string, dir meta.Ino, name string) {
	t.Helper()
	if got, st := mt.lookup(dir, name); st != syscall.ENOENT {
		t.Fatalf("%s, %s: lookup %s: %+v %v, want ENOENT", what, mt.label, name, got, st)
	}
}

// create makes a file and closes it, as an application's creat() and
// close() would; its node.
func (mt *mount) create(t *testing.T, dir meta.Ino, name string, mode uint16) node {
	t.Helper()
	var ino meta.Ino
	var attr meta.Attr
	mustOK(t, mt.label+": create "+name, mt.m.Create(ctx, dir, name, mode, 0, syscall.O_EXCL, &ino, &attr))
	mustOK(t, mt.label+": close "+name, mt.m.Close(ctx, ino))
	return node{ino, meta.TypeFile, mode, 0, 1}
}

// fsck: once every mount is unmounted (each flushed its usage stats),
// JuiceFS's fsck from a client of its own, directly on Redis: links, and
// each directory's usage against what it holds.
func fsck(t *testing.T, url, when string) {
	t.Helper()
	f := openMount(t, "fsck", url)
	f.start(t)
	defer f.unmount(t)
	if err := f.m.Check(ctx, "/", false, true, true); err != nil {
		t.Fatalf("fsck %s: %v (JuiceFS's log above says what)", when, err)
	}
}

func TestTwoMounts(t *testing.T) {
	bin, redisAddr := os.Getenv("SIDECACHE_BIN"), os.Getenv("JUICEFS_REDIS")
	if bin == "" || redisAddr == "" {
		t.Skip("SIDECACHE_BIN or JUICEFS_REDIS unset: run through scripts/run-juicefs-suite.sh")
	}
	grace := envDuration(t, "JUICEFS_MOUNTS_GRACE", 2*time.Second)
	delay := envDuration(t, "JUICEFS_MOUNTS_INV_DELAY", 50*time.Millisecond)
	for _, mode := range []string{"bcast", "default", "optin"} {
		t.Run(mode, func(t *testing.T) { twoMounts(t, bin, redisAddr, mode, grace, delay) })
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

func twoMounts(t *testing.T, bin, redisAddr, mode string, grace, delay time.Duration) {
	relay := startDelayRelay(t, redisAddr, delay)
	proxyArgs := []string{"--tracking-mode", mode, "--tracking-upstream", "redis://" + relay}
	addrA := startProxy(t, bin, redisAddr, proxyArgs...)
	addrB := startProxy(t, bin, redisAddr, proxyArgs...)
	urlA, urlB, urlD := "redis://"+addrA+"/2", "redis://"+addrB+"/2", "redis://"+redisAddr+"/2"

	// juicefs format, through A
	a := openMount(t, "A (sidecache 1)", urlA)
	if err := a.m.Reset(); err != nil {
		t.Fatalf("reset: %v", err)
	}
	format := &meta.Format{Name: "mounts", UUID: "9e0c7c2c-4b52-4bd8-9d3e-5b1f1f0f0001", Storage: "file",
		Bucket: t.TempDir() + "/", BlockSize: 4096, DirStats: true}
	if err := a.m.Init(format, false); err != nil {
		t.Fatalf("format through A: %v", err)
	}
	a.start(t)
	b := openMount(t, "B (sidecache 2)", urlB)
	b.start(t)
	d := openMount(t, "D (direct)", urlD)
	d.start(t)
	// Usage stats made now, of / and (below) of /d: a mount that flushes a
	// stat missing on Redis recomputes it from the tree as it then is, and
	// another mount's pending changes would count twice (JuiceFS's own
	// behaviour), which fsck would report
	syncStat := func(ino meta.Ino) {
		if _, st := d.m.GetDirStat(ctx, ino); st != 0 {
			t.Fatalf("usage stat of inode %d: %v", ino, st)
		}
	}
	syncStat(meta.RootInode)

	// A makes /d with 100 files, some written to
	var dir meta.Ino
	var attr meta.Attr
	mustOK(t, "mkdir /d", a.m.Mkdir(ctx, meta.RootInode, "d", 0755, 0, 0, &dir, &attr))
	syncStat(dir)
	want := model{}
	for i := 0; i < 100; i++ {
		name := fmt.Sprintf("f%d", i)
		n := a.create(t, dir, name, 0644)
		if i%3 == 0 {
			a.write(t, n.ino, uint32(1000+i))
			n.length = uint64(1000 + i)
		}
		want[name] = n
	}
	missing := []string{"n0", "n1", "n2", "n3", "n4"}

	// Every mount reads the directory twice: each cache holds every name,
	// every attribute and the missing names.
	a.expectNow(t, "A's creates", dir, want, missing)
	d.expectNow(t, "A's creates, directly", dir, want, missing)
	b.expectWithin(t, "A's creates", dir, want, missing, grace)
	for _, mt := range []*mount{a, b, d} {
		mt.expectNow(t, "read again", dir, want, missing)
	}

	// A changes what the caches hold; after each change, A's next lookup
	// shows it (Redis's invalidation is still on its way).
	own := "A's own change"
	gone := []string{}
	for i := 0; i < 10; i++ { // renames within the directory
		from, to := fmt.Sprintf("f%d", i), fmt.Sprintf("g%d", i)
		mustOK(t, "rename "+from, a.m.Rename(ctx, dir, from, dir, to, 0, nil, nil))
		a.expectGone(t, own, dir, from)
		a.expectName(t, own, dir, to, want[from])
		want[to] = want[from]
		delete(want, from)
		gone = append(gone, from)
	}
	for i := 10; i < 20; i++ { // unlinks
		name := fmt.Sprintf("f%d", i)
		mustOK(t, "unlink "+name, a.m.Unlink(ctx, dir, name))
		a.expectGone(t, own, dir, name)
		delete(want, name)
		gone = append(gone, name)
	}
	for _, name := range missing { // names that were missing now exist
		want[name] = a.create(t, dir, name, 0600)
		a.expectName(t, own, dir, name, want[name])
	}
	for i := 20; i < 30; i++ { // writes: new lengths
		name := fmt.Sprintf("f%d", i)
		n := want[name]
		a.write(t, n.ino, uint32(5000+i))
		n.length = uint64(5000 + i)
		a.expectName(t, own, dir, name, n)
		want[name] = n
	}
	for i := 30; i < 40; i++ { // chmod
		name := fmt.Sprintf("f%d", i)
		n := want[name]
		set := meta.Attr{Mode: 0600}
		mustOK(t, "chmod "+name, a.m.SetAttr(ctx, n.ino, meta.SetAttrMode, 0, &set))
		n.mode = 0600
		a.expectName(t, own, dir, name, n)
		want[name] = n
	}
	// a rename over an existing name: f41 now is f40's inode
	mustOK(t, "rename f40 over f41", a.m.Rename(ctx, dir, "f40", dir, "f41", 0, nil, nil))
	a.expectGone(t, own, dir, "f40")
	a.expectName(t, own, dir, "f41", want["f40"])
	want["f41"] = want["f40"]
	delete(want, "f40")
	gone = append(gone, "f40")
	// a file moved into a new subdirectory
	var sub meta.Ino
	mustOK(t, "mkdir /d/sub", a.m.Mkdir(ctx, dir, "sub", 0755, 0, 0, &sub, &attr))
	want["sub"] = node{sub, meta.TypeDirectory, 0755, 4096, 2}
	mustOK(t, "rename f50 to sub/f50", a.m.Rename(ctx, dir, "f50", sub, "f50", 0, nil, nil))
	a.expectGone(t, own, dir, "f50")
	moved := model{"f50": want["f50"]}
	delete(want, "f50")
	gone = append(gone, "f50")
	// /d's own attributes changed too: a subdirectory (nlink 3)
	wd := model{"d": node{dir, meta.TypeDirectory, 0755, 4096, 3}}

	a.expectNow(t, "A's changes", dir, want, gone)
	a.expectNow(t, "A's move", sub, moved, nil)
	a.expectNow(t, "/d itself", meta.RootInode, wd, nil)
	d.expectNow(t, "A's changes, directly", dir, want, gone)
	d.expectNow(t, "/d itself, directly", meta.RootInode, wd, nil)
	b.expectWithin(t, "A's changes", dir, want, gone, grace)
	b.expectWithin(t, "A's move", sub, moved, nil, grace)
	b.expectWithin(t, "/d itself", meta.RootInode, wd, nil, grace)

	// Changes made directly on Redis (D, a mount without sidecache)
	for i := 60; i < 65; i++ {
		name := fmt.Sprintf("f%d", i)
		n := want[name]
		set := meta.Attr{Mode: 0640}
		mustOK(t, "D: chmod "+name, d.m.SetAttr(ctx, n.ino, meta.SetAttrMode, 0, &set))
		n.mode = 0640
		want[name] = n
	}
	mustOK(t, "D: unlink f65", d.m.Unlink(ctx, dir, "f65"))
	delete(want, "f65")
	mustOK(t, "D: rename f66 to h66", d.m.Rename(ctx, dir, "f66", dir, "h66", 0, nil, nil))
	want["h66"] = want["f66"]
	delete(want, "f66")
	gone = append(gone, "f65", "f66")
	d.expectNow(t, "D's changes", dir, want, gone)
	a.expectWithin(t, "D's changes", dir, want, gone, grace)
	b.expectWithin(t, "D's changes", dir, want, gone, grace)

	// A and B create the same 40 names at the same moments, O_EXCL: their
	// transactions overlap, one of each pair aborts and retries. Exactly
	// one create of each name succeeds, the other gets EEXIST.
	const racers = 40
	type result struct {
		ino meta.Ino
		st  syscall.Errno
	}
	var res [2][racers]result
	inStep(racers, []*mount{a, b}, func(side int, mt *mount, i int) bool {
		var at meta.Attr
		r := &res[side][i]
		r.st = mt.m.Create(ctx, dir, fmt.Sprintf("c%d", i), 0644, 0, syscall.O_EXCL, &r.ino, &at)
		if r.st == 0 {
			_ = mt.m.Close(ctx, r.ino)
		}
		return true
	})
	wins := [2]int{}
	for i := 0; i < racers; i++ {
		name := fmt.Sprintf("c%d", i)
		r0, r1 := res[0][i], res[1][i]
		if (r0.st == 0) == (r1.st == 0) {
			t.Fatalf("create %s from A and B at once: A %v, B %v: want exactly one success", name, r0.st, r1.st)
		}
		winner, loser, w := r0, r1, 0
		if r1.st == 0 {
			winner, loser, w = r1, r0, 1
		}
		if loser.st != syscall.EEXIST {
			t.Fatalf("create %s: the losing mount got %v, want EEXIST", name, loser.st)
		}
		wins[w]++
		want[name] = node{winner.ino, meta.TypeFile, 0644, 0, 1}
	}
	t.Logf("creates at the same moments: A won %d, B won %d", wins[0], wins[1])
	d.expectNow(t, "the raced creates, directly", dir, want, gone)
	a.expectWithin(t, "the raced creates", dir, want, gone, grace)
	b.expectWithin(t, "the raced creates", dir, want, gone, grace)

	// B's cache holds 20 more names as missing, both as JuiceFS's lookup
	// script answers and as the HGET of the directory's entry that a
	// create reads under WATCH. A creates each, and B creates it right
	// after, while Redis's invalidation of the directory is still on its
	// way to B's sidecache: only a read that goes to Redis (C2) tells B the
	// name exists. Each must get EEXIST.
	var late []string
	for i := 0; i < 20; i++ {
		late = append(late, fmt.Sprintf("e%d", i))
	}
	settle(t, addrB, redisAddr, 2) // what B's cache holds from now on stays
	for _, name := range late {
		b.expectGone(t, "before A's creates", dir, name)
		b.expectGone(t, "before A's creates, again", dir, name)
	}
	hgetMissing(t, addrB, 2, fmt.Sprintf("d%d", dir), late)
	for _, name := range late {
		want[name] = a.create(t, dir, name, 0644)
		var ino meta.Ino
		var at meta.Attr
		if st := b.m.Create(ctx, dir, name, 0644, 0, syscall.O_EXCL, &ino, &at); st != syscall.EEXIST {
			t.Fatalf("B: create %s right after A's: %v (inode %d), want EEXIST", name, st, ino)
		}
	}
	d.expectNow(t, "A's creates, directly", dir, want, gone)
	b.expectWithin(t, "A's creates", dir, want, gone, grace)

	// A and B each make 20 subdirectories of /d at the same moments. Each
	// mkdir reads /d's attributes under WATCH and writes them back with one
	// more link; both caches hold /d's attributes (looked up just before),
	// and the other mount's mkdirs change them: taken from a cache, a stale
	// count would be written back (the WATCH guards only what changes after
	// it), and /d would end with too few links.
	const subdirs = 20
	wd = model{"d": node{dir, meta.TypeDirectory, 0755, 4096, 3}}
	for _, mt := range []*mount{a, b} {
		mt.expectNow(t, "/d before the mkdirs", meta.RootInode, wd, nil)
	}
	var mkdirErr [2]error
	var mu sync.Mutex
	inStep(subdirs, []*mount{a, b}, func(side int, mt *mount, i int) bool {
		name := fmt.Sprintf("s%d-%d", side, i)
		var ino meta.Ino
		var attr meta.Attr
		if st := mt.m.Mkdir(ctx, dir, name, 0755, 0, 0, &ino, &attr); st != 0 {
			mkdirErr[side] = fmt.Errorf("%s: mkdir %s: %v", mt.label, name, st)
			return false
		}
		mu.Lock()
		want[name] = node{ino, meta.TypeDirectory, 0755, 4096, 2}
		mu.Unlock()
		return true
	})
	for _, err := range mkdirErr {
		if err != nil {
			t.Fatal(err)
		}
	}
	wd = model{"d": node{dir, meta.TypeDirectory, 0755, 4096, 3 + 2*subdirs}}
	d.expectNow(t, "/d's links after the mkdirs, directly", meta.RootInode, wd, nil)
	a.expectWithin(t, "/d's links after the mkdirs", meta.RootInode, wd, nil, grace)
	b.expectWithin(t, "/d's links after the mkdirs", meta.RootInode, wd, nil, grace)
	d.expectNow(t, "the mkdirs, directly", dir, want, gone)
	a.expectWithin(t, "the mkdirs", dir, want, gone, grace)
	b.expectWithin(t, "the mkdirs", dir, want, gone, grace)

	// everyone unmounts: JuiceFS's fsck of the whole tree
	for _, mt := range []*mount{a, b, d} {
		mt.unmount(t)
	}
	fsck(t, urlD, "with the tree in place")

	// fresh mounts, A and B through the same sidecaches (whose caches still
	// hold the tree); B removes /d (rm -r)
	a = openMount(t, "A (sidecache 1, mounted again)", urlA)
	a.start(t)
	b = openMount(t, "B (sidecache 2, mounted again)", urlB)
	b.start(t)
	d = openMount(t, "D (direct, mounted again)", urlD)
	d.start(t)
	a.expectNow(t, "before the rm -r", dir, want, gone)
	b.expectNow(t, "before the rm -r", dir, want, gone)
	var count uint64
	mustOK(t, "B: rm -r /d", b.m.Remove(ctx, meta.RootInode, "d", &count))
	if wantCount := uint64(len(want) + len(moved) + 1); count != wantCount {
		t.Fatalf("B: rm -r /d removed %d, want %d (every file, /d/sub and /d)", count, wantCount)
	}
	b.expectNow(t, "B's own rm -r", meta.RootInode, model{}, []string{"d"})
	for name := range want {
		b.expectGone(t, "B's own rm -r", dir, name)
	}
	d.expectNow(t, "B's rm -r, directly", meta.RootInode, model{}, []string{"d"})
	a.expectWithin(t, "B's rm -r", meta.RootInode, model{}, []string{"d"}, grace)
	// every entry's invalidation came before /d's (Redis sends them in
	// order): none may be left
	for name := range want {
		a.expectGone(t, "B's rm -r", dir, name)
	}
	for _, mt := range []*mount{a, b, d} {
		mt.unmount(t)
	}
	fsck(t, urlD, "after the rm -r")

	// the caches took part: lookups (bcast only: tracking per read, they
	// go to Redis) and readdirs answered from them, and entries purged by
	// invalidations
	for _, p := range []struct{ label, addr string }{{"A's sidecache", addrA}, {"B's sidecache", addrB}} {
		info := proxyInfoAt(p.addr)
		for _, k := range []string{"cache_script_hits", "cache_mget_keys_cached", "cache_keys_purged"} {
			v := info[k]
			if k == "cache_script_hits" && mode != "bcast" {
				if v != "0" {
					t.Errorf("%s: INFO sidecache %s is %q: tracking per read, lookups go to Redis", p.label, k, v)
				}
				continue
			}
			if v == "" || v == "0" {
				t.Errorf("%s: INFO sidecache %s is %q: its cache took no part", p.label, k, v)
			}
		}
		t.Logf("%s: lookup scripts answered %s, MGET keys answered %s, entries purged %s, WATCHes answered ahead %s",
			p.label, info["cache_script_hits"], info["cache_mget_keys_cached"], info["cache_keys_purged"], info["watch_ahead"])
	}
}

// hgetMissing reads each field of key twice through the proxy at addr (db):
// the proxy's cache then holds each as missing. Each must be missing.
func hgetMissing(t *testing.T, addr string, db int, key string, fields []string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	defer c.Close()
	for _, f := range fields {
		for i := 0; i < 2; i++ {
			if v, err := c.HGet(context.Background(), key, f).Result(); err != redis.Nil {
				t.Fatalf("HGET %s %s through %s: %q %v, want nil", key, f, addr, v, err)
			}
		}
	}
}

// settle returns once the proxy at addr has handled every invalidation of
// a write made before the call: it caches a marker key (a JuiceFS inode key
// no volume reaches), which is then written directly on Redis; Redis sends
// invalidations in order, so once the proxy shows the new value, those of
// every earlier write have been handled too.
func settle(t *testing.T, addr, redisAddr string, db int) {
	t.Helper()
	const marker = "i9999999999"
	bg := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	defer c.Close()
	direct := redis.NewClient(&redis.Options{Addr: redisAddr, DB: db})
	defer direct.Close()
	v := fmt.Sprint(time.Now().UnixNano())
	for i := 0; i < 2; i++ {
		if err := c.Get(bg, marker).Err(); err != nil && err != redis.Nil {
			t.Fatalf("GET %s through %s: %v", marker, addr, err)
		}
	}
	if err := direct.Set(bg, marker, v, 0).Err(); err != nil {
		t.Fatalf("SET %s: %v", marker, err)
	}
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		got, err := c.Get(bg, marker).Result()
		if err == nil && got == v {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: the marker's new value not shown after 10 s (%q %v)", addr, got, err)
		}
	}
	if err := direct.Del(bg, marker).Err(); err != nil {
		t.Fatalf("DEL %s: %v", marker, err)
	}
}
