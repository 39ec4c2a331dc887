package juicefs

// TestTwoMounts: three clients of one JuiceFS volume, each JuiceFS 1.2.0's
// own metadata engine (pkg/meta), as three mounts would hold them: A through
// one sidecache, B through another, D directly on Redis. JuiceFS's own tests
// (TestRedisClient) use one client; this one checks what a cache in front of
// each mount must get right between mounts:
//
//   - read-your-writes: A's lookups and readdirs right after A's own changes
//     (renames, unlinks, creates of names A had looked up as missing,
//     writes, chmods) show them at once, although A's cache held the old
//     answers;
//   - bounded staleness: B, whose cache held the same old answers, shows A's
//     changes within JUICEFS_MOUNTS_GRACE (default 2s), and D at once;
//   - transactions: A and B creating the same names at the same moment get
//     exactly one success per name, and every mount then finds the winner;
//   - the end state: after B removes the tree (rm -r), every mount finds
//     nothing, and JuiceFS's fsck (Check) finds the volume consistent.
//
// It needs a redis-server and two proxies in front of it:
// scripts/run-juicefs-suite.sh starts them (a pair in each tracking mode)
// and sets JUICEFS_MOUNT_A, JUICEFS_MOUNT_B and JUICEFS_MOUNT_DIRECT
// (redis:// meta URLs). Without them the test is skipped.

import (
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

func proxyInfo(t *testing.T, url string) map[string]string {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	s, err := c.Info(ctx, "sidecache").Result()
	if err != nil {
		t.Fatalf("INFO sidecache through %s: %v", url, err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			out[k] = v
		}
	}
	return out
}

func TestTwoMounts(t *testing.T) {
	urlA, urlB, urlD := os.Getenv("JUICEFS_MOUNT_A"), os.Getenv("JUICEFS_MOUNT_B"), os.Getenv("JUICEFS_MOUNT_DIRECT")
	if urlA == "" || urlB == "" || urlD == "" {
		t.Skip("JUICEFS_MOUNT_A, _B and _DIRECT unset: run through scripts/run-juicefs-suite.sh")
	}
	grace := 2 * time.Second
	if g := os.Getenv("JUICEFS_MOUNTS_GRACE"); g != "" {
		var err error
		if grace, err = time.ParseDuration(g); err != nil {
			t.Fatalf("JUICEFS_MOUNTS_GRACE: %v", err)
		}
	}

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
	// The root's usage stat, made now: a mount that flushes a stat missing
	// on Redis recomputes it from the tree as it then is, and another
	// mount's pending changes would count twice (JuiceFS's own behaviour)
	if _, st := d.m.GetDirStat(ctx, meta.RootInode); st != 0 {
		t.Fatalf("usage stat of /: %v", st)
	}

	// A makes /d with 100 files, some written to
	var dir meta.Ino
	var attr meta.Attr
	mustOK(t, "mkdir /d", a.m.Mkdir(ctx, meta.RootInode, "d", 0755, 0, 0, &dir, &attr))
	want := model{}
	for i := 0; i < 100; i++ {
		name := fmt.Sprintf("f%d", i)
		var ino meta.Ino
		mustOK(t, "create "+name, a.m.Create(ctx, dir, name, 0644, 0, 0, &ino, &attr))
		n := node{ino, meta.TypeFile, 0644, 0, 1}
		if i%3 == 0 {
			a.write(t, ino, uint32(1000+i))
			n.length = uint64(1000 + i)
		}
		want[name] = n
	}
	missing := []string{"n0", "n1", "n2", "n3", "n4"}

	// Every mount reads the directory twice: each cache holds every name,
	// every attribute and the missing names.
	for _, mt := range []*mount{a, b, d} {
		mt.expectWithin(t, "after the creates", dir, want, missing, grace)
		mt.expectNow(t, "read again", dir, want, missing)
	}

	// A changes what the caches hold.
	gone := []string{}
	for i := 0; i < 10; i++ { // renames within the directory
		from, to := fmt.Sprintf("f%d", i), fmt.Sprintf("g%d", i)
		mustOK(t, "rename "+from, a.m.Rename(ctx, dir, from, dir, to, 0, nil, nil))
		want[to] = want[from]
		delete(want, from)
		gone = append(gone, from)
	}
	for i := 10; i < 20; i++ { // unlinks
		name := fmt.Sprintf("f%d", i)
		mustOK(t, "unlink "+name, a.m.Unlink(ctx, dir, name))
		delete(want, name)
		gone = append(gone, name)
	}
	for _, name := range missing { // names that were missing now exist
		var ino meta.Ino
		mustOK(t, "create "+name, a.m.Create(ctx, dir, name, 0600, 0, 0, &ino, &attr))
		want[name] = node{ino, meta.TypeFile, 0600, 0, 1}
	}
	for i := 20; i < 30; i++ { // writes: new lengths
		name := fmt.Sprintf("f%d", i)
		a.write(t, want[name].ino, uint32(5000+i))
		n := want[name]
		n.length = uint64(5000 + i)
		want[name] = n
	}
	for i := 30; i < 40; i++ { // chmod
		name := fmt.Sprintf("f%d", i)
		n := want[name]
		set := meta.Attr{Mode: 0600}
		mustOK(t, "chmod "+name, a.m.SetAttr(ctx, n.ino, meta.SetAttrMode, 0, &set))
		n.mode = 0600
		want[name] = n
	}
	// a rename over an existing name: f41 now is f40's inode
	mustOK(t, "rename f40 over f41", a.m.Rename(ctx, dir, "f40", dir, "f41", 0, nil, nil))
	want["f41"] = want["f40"]
	delete(want, "f40")
	gone = append(gone, "f40")
	// a file moved into a new subdirectory
	var sub meta.Ino
	mustOK(t, "mkdir /d/sub", a.m.Mkdir(ctx, dir, "sub", 0755, 0, 0, &sub, &attr))
	want["sub"] = node{sub, meta.TypeDirectory, 0755, 4096, 2}
	mustOK(t, "rename f50 to sub/f50", a.m.Rename(ctx, dir, "f50", sub, "f50", 0, nil, nil))
	moved := model{"f50": want["f50"]}
	delete(want, "f50")
	gone = append(gone, "f50")

	a.expectNow(t, "A's own changes (read-your-writes)", dir, want, gone)
	a.expectNow(t, "A's own move", sub, moved, nil)
	d.expectNow(t, "A's changes, directly on Redis", dir, want, gone)
	b.expectWithin(t, "A's changes, through the other proxy", dir, want, gone, grace)
	b.expectWithin(t, "A's move, through the other proxy", sub, moved, nil, grace)
	// /d's own attributes changed too: a subdirectory (nlink 3)
	wd := node{dir, meta.TypeDirectory, 0755, 4096, 3}
	d.expectNow(t, "/d itself, directly", meta.RootInode, model{"d": wd}, nil)
	a.expectNow(t, "/d itself", meta.RootInode, model{"d": wd}, nil)
	b.expectWithin(t, "/d itself", meta.RootInode, model{"d": wd}, nil, grace)

	// A and B create the same 40 names at once, O_EXCL: one wins each (the
	// other gets EEXIST from its transaction), and every mount finds the
	// winner.
	type result struct {
		ino meta.Ino
		st  syscall.Errno
	}
	res := map[string][2]result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for side, mt := range []*mount{a, b} {
		wg.Add(1)
		go func(side int, mt *mount) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				name := fmt.Sprintf("c%d", i)
				var ino meta.Ino
				var at meta.Attr
				st := mt.m.Create(ctx, dir, name, 0644, 0, syscall.O_EXCL, &ino, &at)
				mu.Lock()
				r := res[name]
				r[side] = result{ino, st}
				res[name] = r
				mu.Unlock()
			}
		}(side, mt)
	}
	wg.Wait()
	raceWant := model{}
	for name, r := range res {
		ok0, ok1 := r[0].st == 0, r[1].st == 0
		if ok0 == ok1 {
			t.Fatalf("create %s from A and B at once: A %v, B %v: want exactly one success", name, r[0].st, r[1].st)
		}
		loser, winner := r[1], r[0]
		if ok1 {
			loser, winner = r[0], r[1]
		}
		if loser.st != syscall.EEXIST {
			t.Fatalf("create %s: the losing mount got %v, want EEXIST", name, loser.st)
		}
		raceWant[name] = node{winner.ino, meta.TypeFile, 0644, 0, 1}
	}
	for name, n := range raceWant {
		want[name] = n
	}
	d.expectNow(t, "the raced creates, directly", dir, want, gone)
	a.expectWithin(t, "the raced creates", dir, want, gone, grace)
	b.expectWithin(t, "the raced creates", dir, want, gone, grace)

	// B removes the tree (JuiceFS's rm -r: readdir, unlink, rmdir)
	var count uint64
	mustOK(t, "B: remove /d", b.m.Remove(ctx, meta.RootInode, "d", &count))
	if count == 0 {
		t.Fatalf("B: remove /d removed nothing")
	}
	b.expectNow(t, "B's own remove", meta.RootInode, model{}, []string{"d"})
	d.expectNow(t, "B's remove, directly", meta.RootInode, model{}, []string{"d"})
	a.expectWithin(t, "B's remove", meta.RootInode, model{}, []string{"d"}, grace)
	for name := range want {
		if _, st := a.lookup(dir, name); st != syscall.ENOENT {
			t.Fatalf("A: lookup %s in the removed /d: %v, want ENOENT", name, st)
		}
	}

	// A and B unmount (their dir stats flushed), then JuiceFS's fsck,
	// directly on Redis: links, and each directory's usage against its files
	a.unmount(t)
	b.unmount(t)
	if err := d.m.Check(ctx, "/", false, true, true); err != nil {
		t.Fatalf("fsck: %v", err)
	}

	// the proxies' caches took part: lookups and readdirs were answered
	// from them, and invalidations reached them
	for _, mt := range []*mount{a, b} {
		info := proxyInfo(t, mt.url)
		for _, k := range []string{"cache_script_hits", "cache_mget_keys_cached", "cache_invalidations"} {
			if v := info[k]; v == "" || v == "0" {
				t.Errorf("%s: INFO sidecache %s is %q: its cache took no part", mt.label, k, v)
			}
		}
		t.Logf("%s: script hits %s, MGET keys cached %s, invalidations %s, watch ahead %s", mt.label,
			info["cache_script_hits"], info["cache_mget_keys_cached"], info["cache_invalidations"], info["watch_ahead"])
	}
}
