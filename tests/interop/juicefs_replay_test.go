package interop

// TestJuiceFSReplay: JuiceFS's metadata traffic (juicefs_meta.go) from three
// mounts at once — one through proxy A (RESP3), one through proxy B (RESP2),
// both sidecaches in front of the same redis-server, and one directly on
// Redis (RESP3) — then a check of the whole tree through each of the three.
//
// Phases, on one redis-server (database 1, as redis://host/1):
//
//  1. format: the volume written directly on Redis; a session per mount
//     (SCRIPT LOAD of the lookup script, digest checked); /shared; a forced
//     WATCH conflict: a create in /shared through A while B creates in
//     /shared between A's reads and A's MULTI must retry.
//  2. rounds: the three mounts work at once, each in its own subtree and in
//     /shared (creates of distinct names there conflict on WATCH), with
//     lookups and getattrs of the others' files in between (reads racing
//     writes made through another proxy or directly: cache fills under
//     invalidation). Each round changes what the last round's checks read
//     (attrs by writes, names by renames, unlinks, rmdirs), then all three
//     walk the whole tree and compare it with the model: a proxy that keeps
//     a stale entry, a stale attr or a stale "no such name" fails here.
//     Between two rounds SCRIPT FLUSH on Redis makes the next lookups get
//     NOSCRIPT (the mounts load the script again).
//  3. bulk: 10,000 files created in /bulk through A (pipelined), read through
//     all three (caches filled), batch-unlinked through A in 250-entry
//     transactions while B creates 40 more files there (WATCH conflicts),
//     then every name and inode must be gone through B and directly.
//  4. final: the tree walked through each of the three (readdir, the lookup
//     script, HGET + GET, getattr, readlink, xattrs, chunk lists), removed
//     names and inodes absent, and on Redis itself: the key space, counters
//     usedSpace/totalInodes, delfiles, sliceRef, dir stats, sessions.
//  5. tamper: an attr, an entry and a missing entry changed directly on
//     Redis must show through both proxies (a proxy serving its cached copy
//     would not); restored, the tree must check clean again.
//
// Reads through a proxy of what another proxy or the direct mount wrote may
// lag by the invalidation's trip (DESIGN.md C10): such a read is retried for
// up to JFS_REPLAY_GRACE (default 2s) and the lag is logged; a value still
// wrong after that is a failure. A mount's reads of its own writes get no
// grace (read-your-writes, C1). JFS_REPLAY_GRACE=0 makes every read strict.

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	replayRounds         = 5
	replayFilesPerRound  = 16
	replaySharedPerRound = 6
	replayBulkFiles      = 10000
	replayBulkKeepers    = 40
	replayBulkReaders    = 8 // goroutines per client for the bulk reads
	replayMaxProblems    = 25
)

// ------------------------------------------------------------------------
// The model: what the tree must be.

type jfsNode struct {
	ino      uint64
	typ      uint8
	owner    int    // the mount that writes this inode's attr; -1: several
	attr     []byte // exact i<ino> (files and symlinks)
	mode     uint16 // directories: the fields that do not move
	uid, gid uint32
	parent   uint64
	target   string            // symlinks
	xattr    map[string]string // x<ino>
	chunk0   []string          // c<ino>_0
	children map[string]uint64 // directories
}

type jfsName struct {
	parent uint64
	name   string
}

type jfsDeleted struct {
	typ    uint8
	length uint64
	owner  int
	bulk   bool // one of the 10,000 (checked in bulk, not by every walk)
}

type jfsModel struct {
	mu       sync.RWMutex
	nodes    map[uint64]*jfsNode
	gone     map[jfsName]int // names removed -> the mount that removed them
	deleted  map[uint64]jfsDeleted
	sliceRef map[string]int64
	maxSlice uint64
}

func newJfsModel() *jfsModel {
	return &jfsModel{
		nodes:    map[uint64]*jfsNode{},
		gone:     map[jfsName]int{},
		deleted:  map[uint64]jfsDeleted{},
		sliceRef: map[string]int64{},
	}
}

func (md *jfsModel) add(parent uint64, name string, ino uint64, attr jfsAttr, owner int, target string) {
	md.mu.Lock()
	defer md.mu.Unlock()
	n := &jfsNode{ino: ino, typ: attr.Typ, owner: owner, target: target}
	if attr.Typ == jfsTypeDir {
		n.mode, n.uid, n.gid, n.parent = attr.Mode, attr.Uid, attr.Gid, attr.Parent
		n.children = map[string]uint64{}
	} else {
		n.attr = attr.marshal()
	}
	md.nodes[ino] = n
	if parent != 0 {
		md.nodes[parent].children[name] = ino
		delete(md.gone, jfsName{parent, name})
	}
}

func (md *jfsModel) setOwner(ino uint64, owner int) {
	md.mu.Lock()
	defer md.mu.Unlock()
	md.nodes[ino].owner = owner
}

func (md *jfsModel) wrote(ino uint64, attr jfsAttr, slice []byte) {
	md.mu.Lock()
	defer md.mu.Unlock()
	n := md.nodes[ino]
	n.attr = attr.marshal()
	n.chunk0 = append(n.chunk0, string(slice))
	if _, id, _, _, _, err := jfsParseSlice(slice); err == nil && id > md.maxSlice {
		md.maxSlice = id
	}
}

func (md *jfsModel) setXattr(ino uint64, k, v string) {
	md.mu.Lock()
	defer md.mu.Unlock()
	n := md.nodes[ino]
	if n.xattr == nil {
		n.xattr = map[string]string{}
	}
	n.xattr[k] = v
}

// removeName drops parent/name; the inode goes too when del.
func (md *jfsModel) removeName(parent uint64, name string, owner int, del bool, lastAttr *jfsAttr, bulk bool) {
	md.mu.Lock()
	defer md.mu.Unlock()
	p := md.nodes[parent]
	ino := p.children[name]
	delete(p.children, name)
	md.gone[jfsName{parent, name}] = owner
	if del {
		n := md.nodes[ino]
		d := jfsDeleted{typ: n.typ, owner: owner, bulk: bulk}
		if lastAttr != nil {
			d.length = lastAttr.Length
		}
		md.deleted[ino] = d
		delete(md.nodes, ino)
	}
}

func (md *jfsModel) renamed(ps uint64, ns string, pd uint64, nd string, r jfsRenamed, owner int) {
	md.mu.Lock()
	defer md.mu.Unlock()
	delete(md.nodes[ps].children, ns)
	md.gone[jfsName{ps, ns}] = owner
	if r.Replaced != 0 {
		n := md.nodes[r.Replaced]
		md.deleted[r.Replaced] = jfsDeleted{typ: n.typ, length: r.ReplacedAttr.Length, owner: owner}
		delete(md.nodes, r.Replaced)
	}
	md.nodes[pd].children[nd] = r.Ino
	delete(md.gone, jfsName{pd, nd})
	n := md.nodes[r.Ino]
	if n.typ == jfsTypeDir {
		n.parent = pd
	} else {
		n.attr = r.Attr.marshal()
	}
}

func (md *jfsModel) cloned(dst uint64, cs []jfsCloned, owner int) {
	md.mu.Lock()
	defer md.mu.Unlock()
	for _, c := range cs {
		src := md.nodes[c.SrcIno]
		n := &jfsNode{ino: c.Ino, typ: c.Attr.Typ, owner: owner, attr: c.Attr.marshal(), target: src.target}
		if len(src.xattr) > 0 {
			n.xattr = map[string]string{}
			for k, v := range src.xattr {
				n.xattr[k] = v
			}
		}
		n.chunk0 = append([]string(nil), src.chunk0...)
		for _, s := range src.chunk0 {
			if _, id, size, _, _, err := jfsParseSlice([]byte(s)); err == nil && id > 0 {
				md.sliceRef[jfsSliceKey(id, size)]++
			}
		}
		md.nodes[c.Ino] = n
		md.nodes[dst].children[c.Name] = c.Ino
		delete(md.gone, jfsName{dst, c.Name})
	}
}

// poolEntry is a name another mount made, for reads while mounts work.
type poolEntry struct {
	parent uint64
	name   string
	ino    uint64
	typ    uint8
}

func (md *jfsModel) pool(notOwner int) []poolEntry {
	md.mu.RLock()
	defer md.mu.RUnlock()
	var out []poolEntry
	for pino, p := range md.nodes {
		for name, ino := range p.children {
			if c := md.nodes[ino]; c != nil && c.owner != notOwner {
				out = append(out, poolEntry{pino, name, ino, c.typ})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ino < out[j].ino })
	return out
}

func (md *jfsModel) nlink(n *jfsNode) uint32 {
	l := uint32(2)
	for _, c := range n.children {
		if md.nodes[c].typ == jfsTypeDir {
			l++
		}
	}
	return l
}

// ------------------------------------------------------------------------
// The run.

type replay struct {
	t       *testing.T
	ctx     context.Context
	e       *env
	labels  [3]string
	clients [3]*redis.Client
	metas   [3]*jfsMeta
	raw     *redis.Client // checks directly on Redis, RESP2
	model   *jfsModel
	grace   time.Duration
	shared  uint64
	bulk    uint64
	uuid    string

	staleMu   sync.Mutex
	staleN    int
	staleMax  time.Duration
	staleSeen []string
}

const (
	mountA = 0 // through proxy A, RESP3
	mountB = 1 // through proxy B, RESP2
	mountC = 2 // directly on Redis, RESP3
)

func newReplay(t *testing.T) *replay {
	e := newEnv(t, envOpts{})
	rp := &replay{t: t, e: e, model: newJfsModel(), grace: 2 * time.Second}
	if g := os.Getenv("JFS_REPLAY_GRACE"); g != "" {
		d, err := time.ParseDuration(g)
		if err != nil {
			t.Fatalf("JFS_REPLAY_GRACE=%q: %v", g, err)
		}
		rp.grace = d
	}
	rp.ctx = testCtx(t, 170*time.Second)
	addrB := e.proxyAddr
	if !targetDirect() {
		_, ps, err := net.SplitHostPort(e.redisAddr)
		if err != nil {
			t.Fatal(err)
		}
		rport, _ := strconv.Atoi(ps)
		addrB = net.JoinHostPort("127.0.0.1", strconv.Itoa(startProxy(t, proxyBin(t), rport, "")))
	}
	addrs := [3]string{e.proxyAddr, addrB, e.redisAddr}
	protos := [3]int{3, 2, 3}
	rp.labels = [3]string{"mount A (proxy A " + addrs[0] + ", RESP3)", "mount B (proxy B " + addrs[1] + ", RESP2)",
		"mount C (Redis " + addrs[2] + ", RESP3)"}
	if targetDirect() {
		rp.labels[0], rp.labels[1] = "mount A (Redis, RESP3)", "mount B (Redis, RESP2)"
	}
	for i := range rp.clients {
		// JuiceFS's options for redis://host/1 (redis.go newRedisMeta),
		// except retries: JuiceFS retries I/O errors 10 times, which would
		// hide a connection the proxy dropped; the replay wants to see it.
		c := redis.NewClient(&redis.Options{
			Addr: addrs[i], DB: 1, Protocol: protos[i], ClientName: fmt.Sprintf("jfs-replay-%c", 'A'+i),
			ReadTimeout: 30 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: -1,
		})
		t.Cleanup(func() { _ = c.Close() })
		rp.clients[i] = c
		rp.metas[i] = newJfsMeta(c, rp.labels[i])
	}
	rp.raw = e.direct(1)
	return rp
}

func (rp *replay) noteStale(label, what string, lag time.Duration, first error) {
	rp.staleMu.Lock()
	defer rp.staleMu.Unlock()
	rp.staleN++
	if lag > rp.staleMax {
		rp.staleMax = lag
	}
	if len(rp.staleSeen) < 5 {
		rp.staleSeen = append(rp.staleSeen, fmt.Sprintf("%s: %s: right after %v (first read: %v)", label, what, lag.Round(time.Millisecond), first))
	}
}

// eventually runs f. When it fails and the read may lag behind a write made
// elsewhere (!strict), f is tried again for up to the grace period and a
// success then counts as a lag. Once one read did not converge (gaveUp), the
// others of the phase are not waited for.
func (rp *replay) eventually(label string, strict bool, gaveUp *atomic.Bool, what string, f func() error) error {
	err := f()
	if err == nil {
		return nil
	}
	if !strict && rp.grace > 0 && !gaveUp.Load() {
		start := time.Now()
		for time.Since(start) < rp.grace {
			time.Sleep(5 * time.Millisecond)
			err2 := f()
			if err2 == nil {
				rp.noteStale(label, what, time.Since(start), err)
				return nil
			}
			err = err2
		}
		gaveUp.Store(true)
		return fmt.Errorf("%s: %v (still wrong after %v)", what, err, rp.grace)
	}
	if strict {
		return fmt.Errorf("%s: %v (this mount's own write, read back: read-your-writes)", what, err)
	}
	return fmt.Errorf("%s: %v", what, err)
}

// attrDiff says how got differs from want ("" when equal).
func attrDiff(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	if got == nil {
		return "no attr (nil)"
	}
	ga, err := jfsParseAttr(got)
	if err != nil {
		return err.Error()
	}
	wa, _ := jfsParseAttr(want)
	gv, wv := reflect.ValueOf(ga), reflect.ValueOf(wa)
	var d []string
	for i := 0; i < gv.NumField(); i++ {
		if gv.Field(i).Interface() != wv.Field(i).Interface() {
			d = append(d, fmt.Sprintf("%s %v, want %v", gv.Type().Field(i).Name, gv.Field(i).Interface(), wv.Field(i).Interface()))
		}
	}
	return "attr differs: " + strings.Join(d, "; ")
}

// dirDiff checks a directory's attr against the fields that do not move
// (its times change with every entry made in it).
func dirDiff(got []byte, n *jfsNode, nlink uint32) string {
	if got == nil {
		return "no attr (nil)"
	}
	a, err := jfsParseAttr(got)
	if err != nil {
		return err.Error()
	}
	want := jfsAttr{Typ: jfsTypeDir, Mode: n.mode, Uid: n.uid, Gid: n.gid, Nlink: nlink, Length: 4 << 10, Parent: n.parent}
	want.Atime, want.Atimensec, want.Mtime, want.Mtimensec, want.Ctime, want.Ctimensec =
		a.Atime, a.Atimensec, a.Mtime, a.Mtimensec, a.Ctime, a.Ctimensec
	if d := attrDiff(got, want.marshal()); d != "" {
		return "directory " + d + " (times not compared)"
	}
	return ""
}

func (md *jfsModel) expectDiff(n *jfsNode, got []byte) string {
	if n.typ == jfsTypeDir {
		return dirDiff(got, n, md.nlink(n))
	}
	return attrDiff(got, n.attr)
}

// ------------------------------------------------------------------------
// The walk: the whole tree through one mount, compared with the model.

type walker struct {
	rp       *replay
	m        *jfsMeta
	label    string
	self     int // this mount's own items are read strictly
	gaveUp   atomic.Bool
	problems []string
	max      int
	noGrace  bool // one read per check: the tamper walk looks for differences
}

func (rp *replay) newWalker(who int) *walker {
	return &walker{rp: rp, m: rp.metas[who], label: rp.labels[who], self: who, max: replayMaxProblems}
}

func (w *walker) check(strict bool, what string, f func() error) {
	if len(w.problems) >= w.max {
		return
	}
	if w.noGrace {
		if err := f(); err != nil {
			w.problems = append(w.problems, fmt.Sprintf("%s: %v", what, err))
		}
		return
	}
	if err := w.rp.eventually(w.label, strict, &w.gaveUp, what, f); err != nil {
		w.problems = append(w.problems, err.Error())
	}
}

// walk checks every directory from the root, every removed name and every
// removed inode (but the bulk's, checked on their own).
func (w *walker) walk() []string {
	md := w.rp.model
	md.mu.RLock()
	defer md.mu.RUnlock()
	ctx := w.rp.ctx
	w.dir(jfsRootIno, "")
	gone := make([]jfsName, 0, len(md.gone))
	for g := range md.gone {
		gone = append(gone, g)
	}
	sort.Slice(gone, func(i, j int) bool {
		return gone[i].parent < gone[j].parent || gone[i].parent == gone[j].parent && gone[i].name < gone[j].name
	})
	for _, g := range gone {
		if g.parent == w.rp.bulk && !w.sampleBulk(g.name) {
			continue
		}
		strict := md.gone[g] == w.self
		what := fmt.Sprintf("removed name d%d %q", g.parent, g.name)
		w.check(strict, what+" (lookup script)", func() error {
			ino, attr, err := w.m.Lookup(ctx, g.parent, g.name)
			if errors.Is(err, syscall.ENOENT) {
				return nil
			} else if err != nil {
				return err
			}
			return fmt.Errorf("found: ino %d, attr %x", ino, attr)
		})
		w.check(strict, what+" (HGET)", func() error {
			_, ino, _, err := w.m.LookupPlain(ctx, g.parent, g.name)
			if errors.Is(err, syscall.ENOENT) {
				return nil
			} else if err != nil {
				return err
			}
			return fmt.Errorf("found: ino %d", ino)
		})
	}
	dels := make([]uint64, 0, len(md.deleted))
	for ino, d := range md.deleted {
		if !d.bulk {
			dels = append(dels, ino)
		}
	}
	sort.Slice(dels, func(i, j int) bool { return dels[i] < dels[j] })
	for _, ino := range dels {
		d := md.deleted[ino]
		strict := d.owner == w.self
		w.check(strict, fmt.Sprintf("removed inode %d getattr", ino), func() error {
			a, err := w.m.GetAttr(ctx, ino)
			if errors.Is(err, syscall.ENOENT) {
				return nil
			} else if err != nil {
				return err
			}
			return fmt.Errorf("GET i%d returned %x", ino, a)
		})
		if d.typ == jfsTypeDir {
			w.check(strict, fmt.Sprintf("removed directory %d entries", ino), func() error {
				n, err := w.m.rdb.HLen(ctx, jfsEntryKey(ino)).Result()
				if err != nil || n != 0 {
					return fmt.Errorf("HLEN d%d = %d, %v; want 0", ino, n, err)
				}
				return nil
			})
		}
		if d.typ == jfsTypeSymlink {
			w.check(strict, fmt.Sprintf("removed symlink %d target", ino), func() error {
				s, err := w.m.Readlink(ctx, ino)
				if err != nil || s != "" {
					return fmt.Errorf("GET s%d = %q, %v; want nil", ino, s, err)
				}
				return nil
			})
		}
	}
	return w.problems
}

// sampleBulk: one removed bulk name in 50 is looked up by every walk.
func (w *walker) sampleBulk(name string) bool {
	return strings.HasSuffix(name, "00") || strings.HasSuffix(name, "50")
}

func (w *walker) dir(ino uint64, path string) {
	md := w.rp.model
	ctx := w.rp.ctx
	n := md.nodes[ino]
	shown := path
	if shown == "" {
		shown = "/"
	}
	names := make([]string, 0, len(n.children))
	allMine := n.owner == w.self
	for name, c := range n.children {
		names = append(names, name)
		if md.nodes[c].owner != w.self {
			allMine = false
		}
	}
	sort.Strings(names)
	w.check(n.owner == w.self, fmt.Sprintf("getattr %s (ino %d)", shown, ino), func() error {
		a, err := w.m.GetAttr(ctx, ino)
		if err != nil {
			return err
		}
		if d := md.expectDiff(n, a); d != "" {
			return errors.New(d)
		}
		return nil
	})
	if ino == w.rp.bulk && len(n.children) > 1000 {
		return // the 10,000 are checked by the bulk phase
	}
	w.check(allMine, fmt.Sprintf("readdir %s (ino %d)", shown, ino), func() error {
		es, err := w.m.Readdir(ctx, ino, true)
		if err != nil {
			return err
		}
		var bad []string
		got := map[string]bool{}
		for _, e := range es {
			got[e.Name] = true
			want, ok := n.children[e.Name]
			if !ok {
				bad = append(bad, fmt.Sprintf("unexpected name %s/%s (ino %d)", path, e.Name, e.Ino))
				continue
			}
			c := md.nodes[want]
			if e.Ino != want || e.Typ != c.typ {
				bad = append(bad, fmt.Sprintf("%s/%s: entry (type %d, ino %d), want (type %d, ino %d)", path, e.Name, e.Typ, e.Ino, c.typ, want))
				continue
			}
			if d := md.expectDiff(c, e.Attr); d != "" {
				bad = append(bad, fmt.Sprintf("%s/%s (ino %d) MGET: %s", path, e.Name, want, d))
			}
		}
		for _, name := range names {
			if !got[name] {
				bad = append(bad, fmt.Sprintf("missing name %s/%s (ino %d)", path, name, n.children[name]))
			}
		}
		if len(bad) > 0 {
			return errors.New(strings.Join(bad, "; "))
		}
		return nil
	})
	for _, name := range names {
		cino := n.children[name]
		c := md.nodes[cino]
		cpath := path + "/" + name
		mine := c.owner == w.self
		w.check(mine, fmt.Sprintf("lookup script %s (d%d %q, ino %d)", cpath, ino, name, cino), func() error {
			gi, ga, err := w.m.Lookup(ctx, ino, name)
			if err != nil {
				return err
			}
			if gi != cino {
				return fmt.Errorf("ino %d, want %d", gi, cino)
			}
			if d := md.expectDiff(c, ga); d != "" {
				return errors.New(d)
			}
			return nil
		})
		w.check(mine, fmt.Sprintf("lookup HGET+GET %s (ino %d)", cpath, cino), func() error {
			gt, gi, ga, err := w.m.LookupPlain(ctx, ino, name)
			if err != nil {
				return err
			}
			if gi != cino || gt != c.typ {
				return fmt.Errorf("entry (type %d, ino %d), want (type %d, ino %d)", gt, gi, c.typ, cino)
			}
			if d := md.expectDiff(c, ga); d != "" {
				return errors.New(d)
			}
			return nil
		})
		w.check(mine, fmt.Sprintf("getattr %s (ino %d)", cpath, cino), func() error {
			ga, err := w.m.GetAttr(ctx, cino)
			if err != nil {
				return err
			}
			if d := md.expectDiff(c, ga); d != "" {
				return errors.New(d)
			}
			return nil
		})
		switch c.typ {
		case jfsTypeSymlink:
			w.check(mine, fmt.Sprintf("readlink %s (ino %d)", cpath, cino), func() error {
				s, err := w.m.Readlink(ctx, cino)
				if err != nil || s != c.target {
					return fmt.Errorf("GET s%d = %q, %v; want %q", cino, s, err, c.target)
				}
				return nil
			})
		case jfsTypeFile:
			w.check(mine, fmt.Sprintf("xattrs and chunks %s (ino %d)", cpath, cino), func() error {
				x, err := w.m.rdb.HGetAll(ctx, jfsXattrKey(cino)).Result()
				if err != nil {
					return err
				}
				if len(x) != len(c.xattr) || len(x) > 0 && !reflect.DeepEqual(x, c.xattr) {
					return fmt.Errorf("HGETALL x%d = %v, want %v", cino, x, c.xattr)
				}
				ch, err := w.m.rdb.LRange(ctx, jfsChunkKey(cino, 0), 0, -1).Result()
				if err != nil {
					return err
				}
				if len(ch) != len(c.chunk0) || len(ch) > 0 && !reflect.DeepEqual(ch, c.chunk0) {
					return fmt.Errorf("LRANGE c%d_0: %d slices, want %d", cino, len(ch), len(c.chunk0))
				}
				return nil
			})
		case jfsTypeDir:
			w.dir(cino, cpath)
		}
	}
}

// walkAll walks the tree through the three mounts at once and reports.
func (rp *replay) walkAll(t *testing.T, phase string) {
	var wg sync.WaitGroup
	results := make([][]string, 3)
	for who := 0; who < 3; who++ {
		wg.Add(1)
		go func(who int) {
			defer wg.Done()
			results[who] = rp.newWalker(who).walk()
		}(who)
	}
	wg.Wait()
	for who, probs := range results {
		if len(probs) > 0 {
			t.Errorf("%s: the tree through %s differs from what was written (%d problems):\n  %s",
				phase, rp.labels[who], len(probs), strings.Join(probs, "\n  "))
		}
	}
}

// ------------------------------------------------------------------------
// The mounts' work.

type replayWorker struct {
	rp    *replay
	id    int
	m     *jfsMeta
	label string
	rnd   *rand.Rand
	uid   uint32
	gid   uint32
	home  uint64
	subs  []uint64 // s<r>
	empty []uint64 // e<r>
	pool  []poolEntry

	looseReads, looseMissing, looseNoAttr int
}

func (wk *replayWorker) mknod(parent uint64, name string, typ uint8, mode uint16, target string) (uint64, error) {
	ino, attr, err := wk.m.Mknod(wk.rp.ctx, parent, name, typ, mode, wk.uid, wk.gid, target)
	if err != nil {
		return 0, fmt.Errorf("%s: mknod d%d %q (type %d): %w", wk.label, parent, name, typ, err)
	}
	wk.rp.model.add(parent, name, ino, attr, wk.id, target)
	return ino, nil
}

func (wk *replayWorker) child(parent uint64, name string) uint64 {
	md := wk.rp.model
	md.mu.RLock()
	defer md.mu.RUnlock()
	return md.nodes[parent].children[name]
}

func (wk *replayWorker) write(ino uint64, n uint32) error {
	attr, slice, err := wk.m.Write(wk.rp.ctx, ino, n)
	if err != nil {
		return fmt.Errorf("%s: write %d bytes to inode %d: %w", wk.label, n, ino, err)
	}
	wk.rp.model.wrote(ino, attr, slice)
	return nil
}

func (wk *replayWorker) rename(ps uint64, ns string, pd uint64, nd string) error {
	r, err := wk.m.Rename(wk.rp.ctx, ps, ns, pd, nd)
	if err != nil {
		return fmt.Errorf("%s: rename d%d %q -> d%d %q: %w", wk.label, ps, ns, pd, nd, err)
	}
	wk.rp.model.renamed(ps, ns, pd, nd, r, wk.id)
	return nil
}

func (wk *replayWorker) unlink(parent uint64, name string) error {
	_, _, attr, err := wk.m.Unlink(wk.rp.ctx, parent, name)
	if err != nil {
		return fmt.Errorf("%s: unlink d%d %q: %w", wk.label, parent, name, err)
	}
	wk.rp.model.removeName(parent, name, wk.id, true, &attr, false)
	return nil
}

// looseRead looks up a name another mount made and reads its attr while the
// mounts work: the answer may be old or new, but must be well formed (and
// fills the caches racing with the writes).
func (wk *replayWorker) looseRead() error {
	if len(wk.pool) == 0 {
		return nil
	}
	ctx := wk.rp.ctx
	e := wk.pool[wk.rnd.Intn(len(wk.pool))]
	wk.looseReads++
	ino, attr, err := wk.m.Lookup(ctx, e.parent, e.name)
	switch {
	case errors.Is(err, syscall.ENOENT):
		wk.looseMissing++
	case err != nil:
		return fmt.Errorf("%s: lookup script d%d %q while others write: %w", wk.label, e.parent, e.name, err)
	case attr == nil:
		wk.looseNoAttr++ // JuiceFS would fall back to HGET + GET
	default:
		a, perr := jfsParseAttr(attr)
		if perr != nil || a.Typ < jfsTypeFile || a.Typ > jfsTypeSymlink || ino == 0 {
			return fmt.Errorf("%s: lookup script d%d %q while others write: ino %d, %v", wk.label, e.parent, e.name, ino, perr)
		}
	}
	a, err := wk.m.GetAttr(ctx, e.ino)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%s: getattr %d while others write: %w", wk.label, e.ino, err)
	}
	if err == nil {
		if _, perr := jfsParseAttr(a); perr != nil {
			return fmt.Errorf("%s: getattr %d while others write: %v", wk.label, e.ino, perr)
		}
	}
	if wk.rnd.Intn(4) == 0 {
		if _, _, _, err := wk.m.LookupPlain(ctx, e.parent, e.name); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("%s: HGET d%d %q while others write: %w", wk.label, e.parent, e.name, err)
		}
	}
	return nil
}

func sharedName(w, r, i int) string { return fmt.Sprintf("w%d.r%d.%d", w, r, i) }

// round is one mount's work in round r.
func (wk *replayWorker) round(r int) error {
	rp := wk.rp
	ctx := rp.ctx
	var err error
	if r == 0 {
		if wk.home, err = wk.mknod(jfsRootIno, fmt.Sprintf("w%d", wk.id), jfsTypeDir, 0755, ""); err != nil {
			return err
		}
	}
	s, err := wk.mknod(wk.home, fmt.Sprintf("s%d", r), jfsTypeDir, 0750, "")
	if err != nil {
		return err
	}
	wk.subs = append(wk.subs, s)
	for i := 0; i < replayFilesPerRound; i++ {
		ino, err := wk.mknod(s, fmt.Sprintf("f%d", i), jfsTypeFile, uint16(0600+i%8*010), "")
		if err != nil {
			return err
		}
		if i%3 == 0 {
			v := fmt.Sprintf("w%d r%d f%d", wk.id, r, i)
			if err := wk.m.SetXattr(ctx, ino, "user.replay", v); err != nil {
				return fmt.Errorf("%s: setxattr %d: %w", wk.label, ino, err)
			}
			rp.model.setXattr(ino, "user.replay", v)
		}
		if i%2 == 0 {
			if err := wk.write(ino, uint32(1000+517*i)); err != nil {
				return err
			}
		}
		if err := wk.looseRead(); err != nil {
			return err
		}
	}
	if _, err := wk.mknod(s, "l0", jfsTypeSymlink, 0777, fmt.Sprintf("../s%d/f0", r)); err != nil {
		return err
	}
	for i := 0; i < replaySharedPerRound; i++ {
		if _, err := wk.mknod(rp.shared, sharedName(wk.id, r, i), jfsTypeFile, 0644, ""); err != nil {
			return err
		}
		if err := wk.looseRead(); err != nil {
			return err
		}
	}
	e, err := wk.mknod(wk.home, fmt.Sprintf("e%d", r), jfsTypeDir, 0700, "")
	if err != nil {
		return err
	}
	wk.empty = append(wk.empty, e)
	if _, err := wk.mknod(e, "only", jfsTypeFile, 0600, ""); err != nil {
		return err
	}
	if r == 0 {
		return nil
	}

	// What the last round's checks read now changes.
	prev := wk.subs[r-1]
	for _, i := range []int{1, 3, 5, 7} {
		if err := wk.write(wk.child(prev, fmt.Sprintf("f%d", i)), uint32(333+i)); err != nil {
			return err
		}
		if err := wk.looseRead(); err != nil {
			return err
		}
	}
	c, err := wk.mknod(wk.home, fmt.Sprintf("c%d", r), jfsTypeDir, 0755, "")
	if err != nil {
		return err
	}
	var srcs []jfsCloneSrc
	for _, name := range []string{"f5", "f6", "f7", "f8", "f9", "l0"} {
		srcs = append(srcs, jfsCloneSrc{Ino: wk.child(prev, name), Name: name + ".clone"})
	}
	cs, err := wk.m.BatchClone(ctx, c, srcs)
	if err != nil {
		return fmt.Errorf("%s: batch clone into d%d: %w", wk.label, c, err)
	}
	rp.model.cloned(c, cs, wk.id)
	if err := wk.rename(prev, "f0", rp.shared, fmt.Sprintf("w%d.mv%d", wk.id, r)); err != nil {
		return err
	}
	if err := wk.rename(rp.shared, sharedName(wk.id, r-1, 0), prev, fmt.Sprintf("back%d", r)); err != nil {
		return err
	}
	if err := wk.rename(rp.shared, sharedName(wk.id, r-1, 1), rp.shared, sharedName(wk.id, r-1, 1)+".renamed"); err != nil {
		return err
	}
	if err := wk.rename(prev, "f2", prev, "f3"); err != nil { // replaces f3
		return err
	}
	if err := wk.looseRead(); err != nil {
		return err
	}
	for _, u := range []struct {
		p    uint64
		name string
	}{{prev, "f4"}, {rp.shared, sharedName(wk.id, r-1, 2)}, {prev, "l0"}, {wk.empty[r-1], "only"}} {
		if err := wk.unlink(u.p, u.name); err != nil {
			return err
		}
	}
	ename := fmt.Sprintf("e%d", r-1)
	if _, err := wk.m.Rmdir(ctx, wk.home, ename); err != nil {
		return fmt.Errorf("%s: rmdir %s: %w", wk.label, ename, err)
	}
	rp.model.removeName(wk.home, ename, wk.id, true, nil, false)
	var names []string
	for i := 10; i < replayFilesPerRound; i++ {
		names = append(names, fmt.Sprintf("f%d", i))
	}
	done, err := wk.m.BatchUnlink(ctx, prev, names)
	if err != nil {
		return fmt.Errorf("%s: batch unlink in d%d: %w", wk.label, prev, err)
	}
	if len(done) != len(names) {
		return fmt.Errorf("%s: batch unlink in d%d removed %d entries, want %d", wk.label, prev, len(done), len(names))
	}
	for _, d := range done {
		a := d.Attr
		rp.model.removeName(prev, d.Name, wk.id, true, &a, false)
	}
	if r >= 2 { // and what the checks two rounds ago read
		old := wk.subs[r-2]
		if err := wk.write(wk.child(old, "f5"), 100); err != nil {
			return err
		}
		if err := wk.rename(old, "f6", old, "f6.b"); err != nil {
			return err
		}
	}
	return wk.looseRead()
}

// ------------------------------------------------------------------------
// The test.

func TestJuiceFSReplay(t *testing.T) {
	start := time.Now()
	rp := newReplay(t)
	ctx := rp.ctx
	phase := time.Now()
	lap := func(name string) {
		t.Logf("phase %s: %v", name, time.Since(phase).Round(time.Millisecond))
		phase = time.Now()
	}

	// 1. Format, sessions, /shared, a forced conflict.
	if sum := sha1.Sum([]byte(jfsLookupScript)); hex.EncodeToString(sum[:]) != jfsLookupSHA {
		t.Fatalf("SHA1 of the lookup script body is %x, want %s", sum, jfsLookupSHA)
	}
	rp.uuid = fmt.Sprintf("replay-%d", time.Now().UnixNano())
	if err := rp.metas[mountC].Format(ctx, jfsFormat{Name: "replay", UUID: rp.uuid, Storage: "file", Bucket: "/var/jfs/",
		BlockSize: 4096, Compression: "none", MetaVersion: 1, DirStats: true}); err != nil {
		t.Fatalf("format directly on Redis: %v", err)
	}
	root, err := rp.raw.Get(ctx, jfsInodeKey(jfsRootIno)).Bytes()
	if err != nil {
		t.Fatalf("GET i1 after format: %v", err)
	}
	rootAttr, err := jfsParseAttr(root)
	if err != nil {
		t.Fatalf("i1: %v", err)
	}
	rp.model.add(0, "", jfsRootIno, rootAttr, -1, "")
	for who, m := range rp.metas {
		if err := m.NewSession(ctx); err != nil {
			t.Fatalf("%s: new session: %v", rp.labels[who], err)
		}
		f, err := m.Load(ctx)
		if err != nil || f.UUID != rp.uuid {
			t.Fatalf("%s: GET setting: UUID %q, %v; want %q", rp.labels[who], f.UUID, err, rp.uuid)
		}
	}
	rp.waitTracking(t)
	ino, attr, err := rp.metas[mountC].Mknod(ctx, jfsRootIno, "shared", jfsTypeDir, 0777, 0, 0, "")
	if err != nil {
		t.Fatalf("mkdir /shared: %v", err)
	}
	rp.model.add(jfsRootIno, "shared", ino, attr, -1, "")
	rp.shared = ino
	rp.forcedConflict(t)
	lap("format")

	// 2. Rounds.
	workers := make([]*replayWorker, 3)
	for who := range workers {
		workers[who] = &replayWorker{rp: rp, id: who, m: rp.metas[who], label: rp.labels[who],
			rnd: rand.New(rand.NewSource(int64(who) + time.Now().UnixNano())), uid: uint32(1000 + who), gid: uint32(2000 + who)}
	}
	for r := 0; r < replayRounds && !t.Failed(); r++ {
		for _, wk := range workers {
			wk.pool = rp.model.pool(wk.id)
		}
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for who, wk := range workers {
			wg.Add(1)
			go func(who int, wk *replayWorker) {
				defer wg.Done()
				errs[who] = wk.round(r)
			}(who, wk)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Errorf("round %d: %v", r, err)
			}
		}
		if t.Failed() {
			break
		}
		if r == 2 {
			rp.scriptFlush(t)
		}
		rp.walkAll(t, fmt.Sprintf("after round %d", r))
	}
	for _, wk := range workers {
		t.Logf("%s: %d reads while others wrote (%d names gone, %d with no attr)", wk.label, wk.looseReads, wk.looseMissing, wk.looseNoAttr)
	}
	lap(fmt.Sprintf("%d rounds", replayRounds))
	if t.Failed() {
		rp.report(t, start)
		return
	}

	// 3. Bulk.
	rp.bulkPhase(t)
	lap("bulk")

	// 4. Final check.
	if !t.Failed() {
		rp.walkAll(t, "final")
		rp.checkRedis(t)
		lap("final check")
	}

	// 5. Tamper.
	if !t.Failed() {
		rp.tamper(t)
		lap("tamper")
	}
	rp.report(t, start)
}

func (rp *replay) report(t *testing.T, start time.Time) {
	for who, m := range rp.metas {
		t.Logf("%s: %d transactions, %d retried attempts, %d script reloads after NOSCRIPT",
			rp.labels[who], m.txns.Load(), m.txRestarts.Load(), m.scriptReloads.Load())
	}
	rp.staleMu.Lock()
	if rp.staleN > 0 {
		t.Logf("reads that lagged a write made elsewhere and converged within %v: %d, longest %v; e.g.\n  %s",
			rp.grace, rp.staleN, rp.staleMax.Round(time.Millisecond), strings.Join(rp.staleSeen, "\n  "))
	} else {
		t.Logf("no read lagged a write made elsewhere")
	}
	rp.staleMu.Unlock()
	if !targetDirect() {
		for who := mountA; who <= mountB; who++ {
			info, err := rp.clients[who].Info(rp.ctx, "sidecache").Result()
			if err != nil {
				t.Logf("%s: INFO sidecache: %v", rp.labels[who], err)
				continue
			}
			var kept []string
			for _, l := range strings.Split(info, "\n") {
				l = strings.TrimSpace(l)
				for _, k := range []string{"tracking_state:", "cache_hits:", "cache_misses:", "cache_fills:",
					"cache_fills_rejected:", "cache_invalidations:", "cache_keys_purged:", "cache_flushes:", "cache_bypassed_in_flight:"} {
					if strings.HasPrefix(l, k) {
						kept = append(kept, l)
					}
				}
			}
			t.Logf("%s: %s", rp.labels[who], strings.Join(kept, " "))
		}
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// waitTracking waits (up to 5 s) until both proxies report tracking active,
// so that the run exercises their caches; a proxy without a cache only gets
// a note.
func (rp *replay) waitTracking(t *testing.T) {
	if targetDirect() {
		return
	}
	for who := mountA; who <= mountB; who++ {
		deadline := time.Now().Add(5 * time.Second)
		state := ""
		for time.Now().Before(deadline) {
			info, err := rp.clients[who].Info(rp.ctx, "sidecache").Result()
			if err == nil {
				for _, l := range strings.Split(info, "\n") {
					if strings.HasPrefix(l, "tracking_state:") {
						state = strings.TrimSpace(strings.TrimPrefix(l, "tracking_state:"))
					}
				}
			}
			if state == "active" {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if state != "active" {
			t.Logf("note: %s reports tracking_state %q: its cache is off for this run", rp.labels[who], state)
		}
	}
}

// forcedConflict: a create in /shared through A; between its reads and its
// MULTI, B creates another name in /shared. A's EXEC must fail (WATCH) and
// its txn retry; both names must then be there.
func (rp *replay) forcedConflict(t *testing.T) {
	ctx := rp.ctx
	a, b := rp.metas[mountA], rp.metas[mountB]
	var intruderErr error
	fired := false
	a.beforeMulti = func(op string, attempt int) {
		if op != "mknod" || attempt != 0 || fired {
			return
		}
		fired = true
		var ino uint64
		var attr jfsAttr
		ino, attr, intruderErr = b.Mknod(ctx, rp.shared, "conflict-intruder", jfsTypeFile, 0644, 1001, 2001, "")
		if intruderErr == nil {
			rp.model.add(rp.shared, "conflict-intruder", ino, attr, mountB, "")
		}
	}
	before := a.txRestarts.Load()
	ino, attr, err := a.Mknod(ctx, rp.shared, "conflict-probe", jfsTypeFile, 0644, 1000, 2000, "")
	a.beforeMulti = nil
	if err != nil || intruderErr != nil {
		t.Fatalf("forced conflict: create through A: %v; create through B in between: %v", err, intruderErr)
	}
	rp.model.add(rp.shared, "conflict-probe", ino, attr, mountA, "")
	if a.txRestarts.Load() == before {
		t.Errorf("%s: a create in d%d whose WATCHed keys were changed through %s before MULTI was not retried: "+
			"EXEC must fail (nil reply, TxFailedErr) when a watched key changed", rp.labels[mountA], rp.shared, rp.labels[mountB])
	}
}

// scriptFlush empties Redis's script cache before each mount looks up a
// name never looked up before: the lookup gets NOSCRIPT, loads the script
// again (SCRIPT LOAD) and retries, as JuiceFS does. Through a proxy the
// NOSCRIPT may be dealt with by the proxy itself; the answer must be right.
// The next walk then runs with the script loaded again.
func (rp *replay) scriptFlush(t *testing.T) {
	for who, m := range rp.metas {
		if err := rp.raw.ScriptFlush(rp.ctx).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		before := m.scriptReloads.Load()
		name := fmt.Sprintf("noscript-probe-%d", who)
		if ino, attr, err := m.Lookup(rp.ctx, rp.shared, name); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("%s: lookup script of a missing name right after SCRIPT FLUSH: ino %d attr %x, %v; want ENOENT",
				rp.labels[who], ino, attr, err)
		}
		reloads := m.scriptReloads.Load() - before
		switch {
		case who == mountC && reloads != 1:
			t.Errorf("%s: %d SCRIPT LOADs after SCRIPT FLUSH, want 1 (NOSCRIPT, SCRIPT LOAD, EVALSHA again)", rp.labels[who], reloads)
		case reloads != 1:
			t.Logf("note: %s: %d SCRIPT LOADs after SCRIPT FLUSH (the proxy did not relay NOSCRIPT)", rp.labels[who], reloads)
		}
		rp.model.mu.Lock()
		rp.model.gone[jfsName{rp.shared, name}] = -1 // looked up again by every walk
		rp.model.mu.Unlock()
	}
}

// ------------------------------------------------------------------------
// Bulk: 10,000 files, batch unlink.

// parallelDo runs f(0..n-1) on k goroutines; it returns the first errors.
func parallelDo(n, k int, f func(i int) error) []error {
	var mu sync.Mutex
	var errs []error
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < k; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if len(errs) < 10 {
						errs = append(errs, err)
					}
					stop := len(errs) >= 10
					mu.Unlock()
					if stop {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

func (rp *replay) bulkPhase(t *testing.T) {
	ctx := rp.ctx
	a := rp.metas[mountA]
	bulk, attr, err := a.Mknod(ctx, jfsRootIno, "bulk", jfsTypeDir, 0755, 1000, 2000, "")
	if err != nil {
		t.Fatalf("mkdir /bulk through A: %v", err)
	}
	rp.model.add(jfsRootIno, "bulk", bulk, attr, -1, "")
	rp.bulk = bulk
	names := make([]string, replayBulkFiles)
	for i := range names {
		names[i] = fmt.Sprintf("f%05d", i)
	}
	t0 := time.Now()
	inos, attrs, err := a.PipelinedCreate(ctx, bulk, names, 0644, 1000, 2000)
	if err != nil {
		t.Fatalf("pipelined create of %d files through A: %v", len(names), err)
	}
	for i := range names {
		rp.model.add(bulk, names[i], inos[i], attrs[i], mountA, "")
	}
	t.Logf("bulk: %d files created through A in %v", len(names), time.Since(t0).Round(time.Millisecond))

	// Read them all through the three mounts: readdir, getattr, HGET, and
	// the lookup script for one in ten (fills the caches).
	t0 = time.Now()
	var wg sync.WaitGroup
	problems := make([][]error, 3)
	for who := 0; who < 3; who++ {
		wg.Add(1)
		go func(who int) {
			defer wg.Done()
			m := rp.metas[who]
			label := rp.labels[who]
			var gaveUp atomic.Bool
			es, err := m.Readdir(ctx, bulk, true)
			if err != nil || len(es) != len(names) {
				problems[who] = append(problems[who], fmt.Errorf("%s: readdir /bulk: %d entries, %v; want %d", label, len(es), err, len(names)))
				return
			}
			byName := map[string]jfsDirEntry{}
			for _, e := range es {
				byName[e.Name] = e
			}
			for i, name := range names {
				e := byName[name]
				if e.Ino != inos[i] || !bytes.Equal(e.Attr, attrs[i].marshal()) {
					problems[who] = append(problems[who], fmt.Errorf("%s: readdir /bulk: %s: ino %d attr %x; want ino %d", label, name, e.Ino, e.Attr, inos[i]))
					return
				}
			}
			problems[who] = append(problems[who], parallelDo(len(names), replayBulkReaders, func(i int) error {
				want := attrs[i].marshal()
				strict := who == mountA
				return rp.eventually(label, strict, &gaveUp, fmt.Sprintf("bulk %s (ino %d) after its create", names[i], inos[i]), func() error {
					got, err := m.GetAttr(ctx, inos[i])
					if err != nil {
						return fmt.Errorf("getattr: %w", err)
					}
					if d := attrDiff(got, want); d != "" {
						return fmt.Errorf("getattr: %s", d)
					}
					if who == mountA {
						return nil
					}
					typ, ino, got, err := m.LookupPlain(ctx, bulk, names[i])
					if err != nil || typ != jfsTypeFile || ino != inos[i] || !bytes.Equal(got, want) {
						return fmt.Errorf("HGET+GET: type %d ino %d attr %x, %v", typ, ino, got, err)
					}
					if i%10 == 0 {
						ino, got, err := m.Lookup(ctx, bulk, names[i])
						if err != nil || ino != inos[i] || !bytes.Equal(got, want) {
							return fmt.Errorf("lookup script: ino %d attr %x, %v", ino, got, err)
						}
					}
					return nil
				})
			})...)
		}(who)
	}
	wg.Wait()
	for _, ps := range problems {
		for _, p := range ps {
			t.Error(p)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("bulk: read through the three mounts in %v", time.Since(t0).Round(time.Millisecond))

	// Batch unlink through A while B creates more files in /bulk.
	t0 = time.Now()
	restartsA := a.txRestarts.Load()
	var done []jfsUnlinked
	var unlinkErr error
	keeperErrs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		done, unlinkErr = a.BatchUnlink(ctx, bulk, names)
	}()
	go func() {
		b := rp.metas[mountB]
		for i := 0; i < replayBulkKeepers; i++ {
			name := fmt.Sprintf("keep%02d", i)
			ino, attr, err := b.Mknod(ctx, bulk, name, jfsTypeFile, 0640, 1001, 2001, "")
			if err != nil {
				keeperErrs <- fmt.Errorf("%s: create /bulk/%s during the batch unlink: %w", rp.labels[mountB], name, err)
				return
			}
			rp.model.add(bulk, name, ino, attr, mountB, "")
			time.Sleep(2 * time.Millisecond)
		}
		keeperErrs <- nil
	}()
	wg.Wait()
	if err := <-keeperErrs; err != nil {
		t.Error(err)
	}
	if unlinkErr != nil {
		t.Fatalf("%s: batch unlink of %d files in /bulk: %v (%d removed)", rp.labels[mountA], len(names), unlinkErr, len(done))
	}
	if len(done) != len(names) {
		t.Fatalf("batch unlink removed %d entries, want %d", len(done), len(names))
	}
	for i, d := range done {
		if d.Name != names[i] || d.Ino != inos[i] || d.Typ != jfsTypeFile || d.Attr.Nlink != 0 {
			t.Fatalf("batch unlink entry %d: %+v, want %s ino %d", i, d, names[i], inos[i])
		}
		a := d.Attr
		rp.model.removeName(bulk, d.Name, mountA, true, &a, true)
	}
	t.Logf("bulk: %d files unlinked through A in %d transactions of up to %d (%d retried attempts) while B created %d, in %v",
		len(done), (len(done)+jfsBatchUnlink-1)/jfsBatchUnlink, jfsBatchUnlink, a.txRestarts.Load()-restartsA, replayBulkKeepers,
		time.Since(t0).Round(time.Millisecond))

	// Gone through every mount (B and C did read them all before).
	t0 = time.Now()
	problems = make([][]error, 3)
	for who := 0; who < 3; who++ {
		wg.Add(1)
		go func(who int) {
			defer wg.Done()
			m := rp.metas[who]
			label := rp.labels[who]
			var gaveUp atomic.Bool
			strict := who == mountA
			problems[who] = append(problems[who], parallelDo(len(names), replayBulkReaders, func(i int) error {
				return rp.eventually(label, strict, &gaveUp, fmt.Sprintf("bulk %s (ino %d) after the batch unlink", names[i], inos[i]), func() error {
					if got, err := m.GetAttr(ctx, inos[i]); !errors.Is(err, syscall.ENOENT) {
						return fmt.Errorf("getattr: %x, %v; want nil", got, err)
					}
					if typ, ino, _, err := m.LookupPlain(ctx, bulk, names[i]); !errors.Is(err, syscall.ENOENT) {
						return fmt.Errorf("HGET d%d %s: type %d ino %d, %v; want nil", bulk, names[i], typ, ino, err)
					}
					if i%10 == 0 {
						if ino, _, err := m.Lookup(ctx, bulk, names[i]); !errors.Is(err, syscall.ENOENT) {
							return fmt.Errorf("lookup script: ino %d, %v; want ENOENT", ino, err)
						}
					}
					return nil
				})
			})...)
		}(who)
	}
	wg.Wait()
	for _, ps := range problems {
		for _, p := range ps {
			t.Error(p)
		}
	}
	t.Logf("bulk: absence checked through the three mounts in %v", time.Since(t0).Round(time.Millisecond))
	n, err := rp.raw.ZCard(ctx, jfsKeyDelfiles).Result()
	if err != nil || n < replayBulkFiles {
		t.Errorf("ZCARD delfiles = %d, %v; want at least %d", n, err, replayBulkFiles)
	}
}

// ------------------------------------------------------------------------
// On Redis itself.

var (
	reInodeKey = regexp.MustCompile(`^i([0-9]+)$`)
	reEntryKey = regexp.MustCompile(`^d([0-9]+)$`)
	reXattrKey = regexp.MustCompile(`^x([0-9]+)$`)
	reSymKey   = regexp.MustCompile(`^s([0-9]+)$`)
	reChunkKey = regexp.MustCompile(`^c([0-9]+)_([0-9]+)$`)
)

func (rp *replay) checkRedis(t *testing.T) {
	ctx := rp.ctx
	md := rp.model
	md.mu.RLock()
	defer md.mu.RUnlock()
	var keys []string
	var cursor uint64
	for {
		ks, next, err := rp.raw.Scan(ctx, cursor, "*", 10000).Result()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		keys = append(keys, ks...)
		if next == 0 {
			break
		}
		cursor = next
	}
	fixed := map[string]bool{jfsKeySetting: true, jfsKeyNextInode: true, jfsKeyNextChunk: true, jfsKeyNextSession: true,
		jfsKeyUsedSpace: true, jfsKeyTotalInodes: true, jfsKeyDelfiles: true, jfsKeySliceRef: true, jfsKeyAllSessions: true,
		jfsKeySessionInfos: true, jfsKeyDirUsedInodes: true, jfsKeyDirDataLength: true, jfsKeyDirUsedSpace: true}
	seenI := map[uint64]bool{}
	var bad []string
	num := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
	for _, k := range keys {
		switch {
		case fixed[k]:
		case reInodeKey.MatchString(k):
			ino := num(reInodeKey.FindStringSubmatch(k)[1])
			seenI[ino] = true
			if md.nodes[ino] == nil {
				bad = append(bad, fmt.Sprintf("%s: an inode that should not exist (removed: %v)", k, md.deleted[ino] != (jfsDeleted{})))
			}
		case reEntryKey.MatchString(k):
			n := md.nodes[num(reEntryKey.FindStringSubmatch(k)[1])]
			if n == nil || n.typ != jfsTypeDir || len(n.children) == 0 {
				bad = append(bad, fmt.Sprintf("%s: entries of a directory that is removed or empty", k))
			}
		case reXattrKey.MatchString(k):
			n := md.nodes[num(reXattrKey.FindStringSubmatch(k)[1])]
			if n == nil || len(n.xattr) == 0 {
				bad = append(bad, fmt.Sprintf("%s: xattrs of a removed inode or of one without xattrs", k))
			}
		case reSymKey.MatchString(k):
			n := md.nodes[num(reSymKey.FindStringSubmatch(k)[1])]
			if n == nil || n.typ != jfsTypeSymlink {
				bad = append(bad, fmt.Sprintf("%s: the target of a removed symlink", k))
			}
		case reChunkKey.MatchString(k):
			// Chunks of removed files stay until JuiceFS's data deletion,
			// which the replay does not do; live ones are checked by walks.
			ino := num(reChunkKey.FindStringSubmatch(k)[1])
			if md.nodes[ino] == nil && md.deleted[ino] == (jfsDeleted{}) {
				bad = append(bad, fmt.Sprintf("%s: chunks of an inode that never was", k))
			}
		default:
			bad = append(bad, fmt.Sprintf("%s: a key JuiceFS would not have", k))
		}
	}
	var space, inodes int64
	var dirs []string
	var maxIno uint64
	for ino, n := range md.nodes {
		if !seenI[ino] {
			bad = append(bad, fmt.Sprintf("i%d: missing", ino))
		}
		if ino > maxIno {
			maxIno = ino
		}
		if ino == jfsRootIno {
			continue
		}
		inodes++
		if n.typ == jfsTypeFile {
			a, _ := jfsParseAttr(n.attr)
			space += jfsAlign4K(a.Length)
		} else {
			space += jfsAlign4K(0)
		}
		if n.typ == jfsTypeDir {
			dirs = append(dirs, strconv.FormatUint(ino, 10))
		}
	}
	var delfiles []string
	for ino, d := range md.deleted {
		if ino > maxIno {
			maxIno = ino
		}
		if d.typ == jfsTypeFile {
			delfiles = append(delfiles, fmt.Sprintf("%d:%d", ino, d.length))
		}
	}
	for who, m := range rp.metas {
		u, n, err := m.Counters(ctx)
		if err != nil || u != space || n != inodes {
			bad = append(bad, fmt.Sprintf("through %s: usedSpace %d, totalInodes %d, %v; want %d, %d", rp.labels[who], u, n, err, space, inodes))
		}
		if f, err := m.Load(ctx); err != nil || f.UUID != rp.uuid {
			bad = append(bad, fmt.Sprintf("through %s: setting UUID %q, %v; want %q", rp.labels[who], f.UUID, err, rp.uuid))
		}
	}
	if v, err := rp.raw.Get(ctx, jfsKeyNextInode).Uint64(); err != nil || v < maxIno {
		bad = append(bad, fmt.Sprintf("nextinode %d, %v; below inode %d", v, err, maxIno))
	}
	if v, err := rp.raw.Get(ctx, jfsKeyNextChunk).Uint64(); err != nil || v < md.maxSlice {
		bad = append(bad, fmt.Sprintf("nextchunk %d, %v; below slice %d", v, err, md.maxSlice))
	}
	got, err := rp.raw.ZRange(ctx, jfsKeyDelfiles, 0, -1).Result()
	sort.Strings(got)
	sort.Strings(delfiles)
	if err != nil || !reflect.DeepEqual(got, delfiles) {
		bad = append(bad, fmt.Sprintf("delfiles: %d members, %v; want %d (the removed files as ino:length)", len(got), err, len(delfiles)))
	}
	refs, err := rp.raw.HGetAll(ctx, jfsKeySliceRef).Result()
	wantRefs := map[string]string{}
	for k, v := range md.sliceRef {
		wantRefs[k] = strconv.FormatInt(v, 10)
	}
	if err != nil || len(refs) != len(wantRefs) || len(refs) > 0 && !reflect.DeepEqual(refs, wantRefs) {
		bad = append(bad, fmt.Sprintf("sliceRef %v, %v; want %v", refs, err, wantRefs))
	}
	sort.Strings(dirs)
	for _, k := range []string{jfsKeyDirUsedInodes, jfsKeyDirDataLength, jfsKeyDirUsedSpace} {
		fs, err := rp.raw.HKeys(ctx, k).Result()
		sort.Strings(fs)
		if err != nil || !reflect.DeepEqual(fs, dirs) {
			bad = append(bad, fmt.Sprintf("HKEYS %s: %v, %v; want the directories %v", k, fs, err, dirs))
		}
	}
	if n, err := rp.raw.ZCard(ctx, jfsKeyAllSessions).Result(); err != nil || n != 3 {
		bad = append(bad, fmt.Sprintf("ZCARD allSessions %d, %v; want 3", n, err))
	}
	if n, err := rp.raw.HLen(ctx, jfsKeySessionInfos).Result(); err != nil || n != 3 {
		bad = append(bad, fmt.Sprintf("HLEN sessionInfos %d, %v; want 3", n, err))
	}
	if len(bad) > 0 {
		t.Errorf("Redis after the replay (%d keys): %d problems:\n  %s", len(keys), len(bad), strings.Join(bad, "\n  "))
	}
	t.Logf("Redis: %d keys, %d inodes, %d directories, usedSpace %d, %d removed files in delfiles, %d sliceRef fields",
		len(keys), inodes+1, len(dirs)+1, space, len(delfiles), len(refs))
}

// ------------------------------------------------------------------------
// Tamper: changes made directly on Redis must show through both proxies.

func (rp *replay) tamper(t *testing.T) {
	ctx := rp.ctx
	md := rp.model
	md.mu.RLock()
	homeA := md.nodes[jfsRootIno].children["w0"]
	lastA := md.nodes[homeA].children[fmt.Sprintf("s%d", replayRounds-1)]
	fileIno := md.nodes[lastA].children["f1"]
	fileAttr := append([]byte(nil), md.nodes[fileIno].attr...)
	goneName := sharedName(mountC, replayRounds-1, 5)
	goneIno := md.nodes[rp.shared].children[goneName]
	md.mu.RUnlock()
	if fileIno == 0 || goneIno == 0 {
		t.Fatalf("tamper: the model has no /w0/s%d/f1 or /shared/%s", replayRounds-1, goneName)
	}
	a, _ := jfsParseAttr(fileAttr)
	a.Length++
	const intruder = "tamper-intruder"
	sigs := map[string]string{
		fmt.Sprintf("/w0/s%d/f1", replayRounds-1): "an attr changed on Redis (SET i" + strconv.FormatUint(fileIno, 10) + ")",
		intruder:              "an entry added on Redis (HSET d" + strconv.FormatUint(homeA, 10) + ")",
		"/shared/" + goneName: "an entry removed on Redis (HDEL d" + strconv.FormatUint(rp.shared, 10) + ")",
	}
	if _, err := rp.raw.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, jfsInodeKey(fileIno), a.marshal(), 0)
		p.HSet(ctx, jfsEntryKey(homeA), intruder, jfsPackEntry(jfsTypeFile, fileIno))
		p.HDel(ctx, jfsEntryKey(rp.shared), goneName)
		return nil
	}); err != nil {
		t.Fatalf("tamper on Redis: %v", err)
	}
	restore := func() {
		if _, err := rp.raw.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, jfsInodeKey(fileIno), fileAttr, 0)
			p.HDel(ctx, jfsEntryKey(homeA), intruder)
			p.HSet(ctx, jfsEntryKey(rp.shared), goneName, jfsPackEntry(jfsTypeFile, goneIno))
			return nil
		}); err != nil {
			t.Fatalf("restore on Redis: %v", err)
		}
	}
	var wg sync.WaitGroup
	for _, who := range []int{mountA, mountB, mountC} {
		wg.Add(1)
		go func(who int) {
			defer wg.Done()
			deadline := time.Now().Add(rp.grace + 100*time.Millisecond)
			for {
				w := rp.newWalker(who)
				w.self, w.max, w.noGrace = -1, 100, true
				w.walk()
				missing := []string{}
				for sig, what := range sigs {
					found := false
					for _, p := range w.problems {
						if strings.Contains(p, sig) {
							found = true
						}
					}
					if !found {
						missing = append(missing, what)
					}
				}
				var other []string
				for _, p := range w.problems {
					related := false
					for sig := range sigs {
						if strings.Contains(p, sig) || strings.Contains(p, "ino "+strconv.FormatUint(fileIno, 10)+")") {
							related = true
						}
					}
					if !related {
						other = append(other, p)
					}
				}
				if len(other) > 0 {
					t.Errorf("tamper: through %s, problems unrelated to the changes:\n  %s", rp.labels[who], strings.Join(other, "\n  "))
					return
				}
				if len(missing) == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("tamper: through %s, not seen within %v: %s — the mount still reads the old value: "+
						"the proxy served its cached copy after Redis changed the key (a missed invalidation)",
						rp.labels[who], rp.grace, strings.Join(missing, "; "))
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}(who)
	}
	wg.Wait()
	restore()
	rp.walkAll(t, "after the tamper was undone")
}
