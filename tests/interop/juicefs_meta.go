package interop

// A replay of JuiceFS 1.4's Redis metadata engine: the same keys, values,
// commands and transactions (../../../shared/JUICEFS-REDIS.md §1-4), written
// afresh over go-redis v9 so that sidecache can be tested with the traffic of
// a real JuiceFS mount without building JuiceFS. juicefs_replay_test.go drives
// it through two proxies and directly against Redis and checks the result.
//
// What is imitated, per operation (no key prefix, no trash, no ACLs, no
// quotas, no hard links, no changelog, case-sensitive names — JuiceFS's
// defaults for a standalone Redis):
//
//   format       GET setting; SET setting <json>; SET i1 <root attr>; the
//                counters (JuiceFS creates them with its first INCRBY)
//   session      INCRBY nextsession 1; MULTI ZADD allSessions, HSET
//                sessionInfos EXEC; SCRIPT LOAD <lookup script>
//   mknod        INCRBY nextinode 1024 (batched); txn(i<p>, d<p>): GET i<p>;
//                HGET d<p> name [GET i<found> → EEXIST]; MULTI SET i<new>,
//                [SET i<p>], [SET s<new>], HSET d<p>, [HSET dir stats 0],
//                INCRBY usedSpace 4096, INCR totalInodes EXEC
//   lookup       EVALSHA <lookup sha> 2 d<p> name (NOSCRIPT: SCRIPT LOAD and
//                again); or HGET d<p> name + GET i<ino>
//   getattr      GET i<ino>
//   readdir      HSCAN d<ino> <cursor> MATCH * COUNT 10000 until 0, then
//                MGET i… in batches of 4096, at most 2 at once
//   write        INCRBY nextchunk 4096 (batched); txn(i): GET i; MULTI RPUSH
//                c<ino>_<indx> <slice>, SET i, [INCRBY usedSpace] EXEC
//   setxattr     txn(x): MULTI HSET x<ino> name value EXEC
//   unlink       txn(i<p>, d<p>): HGET d<p> name; WATCH i<ino>; MGET i<p>
//                i<ino>; MULTI HDEL d<p>, [SET i<p>], ZADD delfiles | DEL s,
//                DEL i, INCRBY usedSpace -n, DECR totalInodes, DEL x EXEC
//   rmdir        txn(i<p>, d<p>): HGET; WATCH i<ino> d<ino>; MGET; HLEN d<ino>;
//                MULTI HDEL, SET i<p>, DEL i, DEL x, INCRBY, DECR, HDEL ×6 EXEC
//   rename       txn(i<ps>, d<ps>, i<pd>, d<pd>): HGET ×2; WATCH i<ino>
//                [i<dst> [d<dst>]]; MGET of 3-4 attrs; [HLEN d<dst>]; MULTI
//                HDEL, [the replaced target's unlink], [SET i<ps>], SET i<ino>,
//                HSET d<pd>, [SET i<pd>] EXEC
//   batch unlink (doBatchUnlink) per 250 entries, txn(i<p>, d<p>): GET i<p>;
//                HMGET d<p> names…; WATCH i<ino>…; MGET i<ino>…; MULTI HDEL
//                d<p> names…, [SET i<p>], ZADD/DEL…, INCRBY usedSpace,
//                DECRBY totalInodes EXEC
//   batch clone  (doBatchClone) txn(i<dst>, i<src>…, x<src>…): GET i<dst>;
//                pipeline HEXISTS d<dst> name…; MGET i<src>…; pipeline HGETALL
//                x, LRANGE c, GET s; MULTI SET i, HSET d, HMSET x, RPUSH c,
//                SET s, SET i<dst>, INCRBY ×2, HINCRBY sliceRef EXEC
//
// A txn is JuiceFS's redisMeta.txn: a process-local lock on fnv(first key),
// then go-redis Watch (WATCH keys, the callback, MULTI … EXEC, UNWATCH) tried
// up to 50 times while it fails with TxFailedErr and the like, sleeping
// rand % (attempt+1)² ms between tries.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	jfsTypeFile    uint8 = 1
	jfsTypeDir     uint8 = 2
	jfsTypeSymlink uint8 = 3

	jfsRootIno = uint64(1)

	jfsAttrLen       = 72 // Attr.Marshal without ACL ids or tier: 71 bytes of fields and a zero byte
	jfsEntryLen      = 9  // packEntry: type u8 + inode u64
	jfsSliceLen      = 24 // marshalSlice: pos u32, id u64, size u32, off u32, len u32
	jfsChunkSize     = 64 << 20
	jfsInodeBatch    = 1024
	jfsSliceBatch    = 4096
	jfsTxnAttempts   = 50
	jfsBatchUnlink   = 250  // entries per doBatchUnlink transaction
	jfsBatchClone    = 1000 // entries per doBatchClone transaction
	jfsHscanCount    = 10000
	jfsReaddirBatch  = 4096 // MGET batch of readdirplus
	jfsSkipDirMtime  = 100 * time.Millisecond
	jfsScriptRetries = 3 // JuiceFS reloads on NOSCRIPT without limit; a replay stops
)

// jfsLookupScript is JuiceFS 1.x's lookup script (pkg/meta/lua_scripts.go);
// SCRIPT LOAD of it returns jfsLookupSHA, the digest sidecache recognises.
const jfsLookupScript = "\nlocal buf = redis.call('HGET', KEYS[1], KEYS[2])\nif not buf then\n    error(\"ENOENT\")\nend\nlocal ino = struct.unpack(\">I8\", string.sub(buf, 2))\n-- double float has 52 significant bits\nif ino > 4503599627370495 then\n    error(\"ENOTSUP\")\nend\nreturn {ino, redis.call('GET', \"i\" .. string.format(\"%.f\", ino))}\n"

const jfsLookupSHA = "8526c64984678fc27f67f44755c8ba7dcdf7ea60"

// Keys, as redisMeta names them (no prefix on a standalone Redis).
func jfsInodeKey(ino uint64) string { return "i" + strconv.FormatUint(ino, 10) }
func jfsEntryKey(ino uint64) string { return "d" + strconv.FormatUint(ino, 10) }
func jfsXattrKey(ino uint64) string { return "x" + strconv.FormatUint(ino, 10) }
func jfsSymKey(ino uint64) string   { return "s" + strconv.FormatUint(ino, 10) }
func jfsSliceKey(id uint64, size uint32) string {
	return "k" + strconv.FormatUint(id, 10) + "_" + strconv.FormatUint(uint64(size), 10)
}
func jfsChunkKey(ino uint64, indx uint32) string {
	return "c" + strconv.FormatUint(ino, 10) + "_" + strconv.FormatUint(uint64(indx), 10)
}

const (
	jfsKeySetting       = "setting"
	jfsKeyNextInode     = "nextinode"
	jfsKeyNextChunk     = "nextchunk"
	jfsKeyNextSession   = "nextsession"
	jfsKeyUsedSpace     = "usedSpace"
	jfsKeyTotalInodes   = "totalInodes"
	jfsKeyDelfiles      = "delfiles"
	jfsKeySliceRef      = "sliceRef"
	jfsKeyAllSessions   = "allSessions"
	jfsKeySessionInfos  = "sessionInfos"
	jfsKeyDirDataLength = "dirDataLength"
	jfsKeyDirUsedSpace  = "dirUsedSpace"
	jfsKeyDirUsedInodes = "dirUsedInodes"
)

// The six per-directory hashes rmdir cleans (dir stats and dir quotas).
var jfsDirStatKeys = []string{jfsKeyDirDataLength, jfsKeyDirUsedSpace, jfsKeyDirUsedInodes,
	"dirQuota", "dirQuotaUsedSpace", "dirQuotaUsedInodes"}

// jfsAlign4K is JuiceFS's align4K: the space a file of that length is
// charged, with an empty file (and every directory and symlink) charged 4 KiB.
func jfsAlign4K(length uint64) int64 {
	if length == 0 {
		return 1 << 12
	}
	return int64((((length - 1) >> 12) + 1) << 12)
}

// jfsAttr is JuiceFS's Attr, the fields that reach i<ino>.
type jfsAttr struct {
	Flags     uint8
	Typ       uint8
	Mode      uint16 // permission bits (12)
	Uid       uint32
	Gid       uint32
	Atime     int64
	Atimensec uint32
	Mtime     int64
	Mtimensec uint32
	Ctime     int64
	Ctimensec uint32
	Nlink     uint32
	Length    uint64
	Rdev      uint32
	Parent    uint64
}

// marshal encodes as Attr.Marshal does: 71 bytes of big-endian fields, then
// the zero byte of its one-too-long buffer.
func (a *jfsAttr) marshal() []byte {
	b := make([]byte, jfsAttrLen)
	be := binary.BigEndian
	b[0] = a.Flags
	be.PutUint16(b[1:], uint16(a.Typ)<<12|a.Mode&0xfff)
	be.PutUint32(b[3:], a.Uid)
	be.PutUint32(b[7:], a.Gid)
	be.PutUint64(b[11:], uint64(a.Atime))
	be.PutUint32(b[19:], a.Atimensec)
	be.PutUint64(b[23:], uint64(a.Mtime))
	be.PutUint32(b[31:], a.Mtimensec)
	be.PutUint64(b[35:], uint64(a.Ctime))
	be.PutUint32(b[43:], a.Ctimensec)
	be.PutUint32(b[47:], a.Nlink)
	be.PutUint64(b[51:], a.Length)
	be.PutUint32(b[59:], a.Rdev)
	be.PutUint64(b[63:], a.Parent)
	return b
}

// jfsParseAttr decodes an i<ino> value; it refuses anything but the 72-byte
// plain form (the replay never sets ACLs or tiers).
func jfsParseAttr(b []byte) (jfsAttr, error) {
	var a jfsAttr
	if len(b) != jfsAttrLen || b[jfsAttrLen-1] != 0 {
		return a, fmt.Errorf("malformed attr: %d bytes %x", len(b), b)
	}
	be := binary.BigEndian
	a.Flags = b[0]
	tm := be.Uint16(b[1:])
	a.Typ, a.Mode = uint8(tm>>12), tm&0xfff
	a.Uid = be.Uint32(b[3:])
	a.Gid = be.Uint32(b[7:])
	a.Atime = int64(be.Uint64(b[11:]))
	a.Atimensec = be.Uint32(b[19:])
	a.Mtime = int64(be.Uint64(b[23:]))
	a.Mtimensec = be.Uint32(b[31:])
	a.Ctime = int64(be.Uint64(b[35:]))
	a.Ctimensec = be.Uint32(b[43:])
	a.Nlink = be.Uint32(b[47:])
	a.Length = be.Uint64(b[51:])
	a.Rdev = be.Uint32(b[59:])
	a.Parent = be.Uint64(b[63:])
	return a, nil
}

func (a *jfsAttr) setAtime(t time.Time) { a.Atime, a.Atimensec = t.Unix(), uint32(t.Nanosecond()) }
func (a *jfsAttr) setMtime(t time.Time) { a.Mtime, a.Mtimensec = t.Unix(), uint32(t.Nanosecond()) }
func (a *jfsAttr) setCtime(t time.Time) { a.Ctime, a.Ctimensec = t.Unix(), uint32(t.Nanosecond()) }

// touchDir updates a parent's mtime and ctime when forced or when its mtime
// is older than SkipDirMtime (JuiceFS's default 100 ms); it reports whether
// the parent's attr must be written.
func (a *jfsAttr) touchDir(now time.Time, force bool) bool {
	if force || now.Sub(time.Unix(a.Mtime, int64(a.Mtimensec))) >= jfsSkipDirMtime {
		a.setMtime(now)
		a.setCtime(now)
		return true
	}
	return false
}

func jfsPackEntry(typ uint8, ino uint64) []byte {
	b := make([]byte, jfsEntryLen)
	b[0] = typ
	binary.BigEndian.PutUint64(b[1:], ino)
	return b
}

func jfsParseEntry(b []byte) (uint8, uint64, error) {
	if len(b) != jfsEntryLen {
		return 0, 0, fmt.Errorf("malformed entry: %d bytes %x", len(b), b)
	}
	return b[0], binary.BigEndian.Uint64(b[1:]), nil
}

func jfsMarshalSlice(pos uint32, id uint64, size, off, length uint32) []byte {
	b := make([]byte, jfsSliceLen)
	be := binary.BigEndian
	be.PutUint32(b[0:], pos)
	be.PutUint64(b[4:], id)
	be.PutUint32(b[12:], size)
	be.PutUint32(b[16:], off)
	be.PutUint32(b[20:], length)
	return b
}

func jfsParseSlice(b []byte) (pos uint32, id uint64, size, off, length uint32, err error) {
	if len(b) != jfsSliceLen {
		return 0, 0, 0, 0, 0, fmt.Errorf("malformed slice: %d bytes", len(b))
	}
	be := binary.BigEndian
	return be.Uint32(b[0:]), be.Uint64(b[4:]), be.Uint32(b[12:]), be.Uint32(b[16:]), be.Uint32(b[20:]), nil
}

// jfsFormat is the part of JuiceFS's Format (the `setting` JSON) a mount
// reads back at start-up.
type jfsFormat struct {
	Name        string
	UUID        string
	Storage     string
	Bucket      string
	BlockSize   int
	Compression string
	TrashDays   int
	MetaVersion int
	DirStats    bool
}

// errJfsNotSup is the lookup script's ENOTSUP (an inode above 2^52-1):
// JuiceFS then falls back to HGET + GET.
var errJfsNotSup = errors.New("lookup script: ENOTSUP")

// jfsMeta is one JuiceFS mount's metadata client over one go-redis client.
// Its methods may be called from several goroutines.
type jfsMeta struct {
	rdb  redis.UniversalClient
	name string

	mu        sync.Mutex
	nextIno   uint64 // next free inode of the prefetched batch
	maxIno    uint64 // last inode of the batch
	nextSlice uint64
	maxSlice  uint64
	shaLookup string
	sid       uint64

	txLocks [1024]sync.Mutex // redisMeta.txLock: fewer conflicts inside one process

	txns          atomic.Int64 // transactions run
	txRestarts    atomic.Int64 // attempts retried (WATCH conflicts and the like)
	scriptReloads atomic.Int64 // SCRIPT LOADs after NOSCRIPT

	// beforeMulti, when set, runs inside every transaction after its reads
	// and just before MULTI, with the operation's name and the attempt
	// (from 0). Tests use it to force a WATCH conflict.
	beforeMulti func(op string, attempt int)
}

func newJfsMeta(rdb redis.UniversalClient, name string) *jfsMeta {
	return &jfsMeta{rdb: rdb, name: name}
}

// jfsShouldRetry is redisMeta.shouldRetry with retryOnFailure false (EOF and
// timeouts are not retried).
func jfsShouldRetry(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, redis.TxFailedErr) {
		return true
	}
	var eno syscall.Errno
	if errors.As(err, &eno) || errors.Is(err, redis.Nil) {
		return false
	}
	s := err.Error()
	if s == "ERR max number of clients reached" || strings.Contains(s, "Conn is in a bad state") ||
		strings.Contains(s, "EXECABORT") {
		return true
	}
	ps := strings.SplitN(s, " ", 3)
	switch ps[0] {
	case "LOADING", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK":
		return true
	case "ERR":
		return len(ps) > 1 && (ps[1] == "DISABLE" || ps[1] == "NOWRITE" || ps[1] == "NOREAD")
	}
	return false
}

// txn runs fn as redisMeta.txn does. fn gets the attempt number (from 0).
func (m *jfsMeta) txn(ctx context.Context, op string, fn func(tx *redis.Tx, attempt int) error, keys ...string) error {
	h := fnv.New32()
	_, _ = h.Write([]byte(keys[0]))
	l := &m.txLocks[h.Sum32()%uint32(len(m.txLocks))]
	l.Lock()
	defer l.Unlock()
	m.txns.Add(1)
	var lastErr error
	for i := 0; i < jfsTxnAttempts; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		attempt := i
		err := m.rdb.Watch(ctx, func(tx *redis.Tx) error { return fn(tx, attempt) }, keys...)
		if jfsShouldRetry(err) {
			m.txRestarts.Add(1)
			lastErr = err
			time.Sleep(time.Millisecond * time.Duration(rand.Intn((i+1)*(i+1))))
			continue
		}
		return err
	}
	return fmt.Errorf("%s: %s: still failing after %d attempts: %w", m.name, op, jfsTxnAttempts, lastErr)
}

func (m *jfsMeta) preMulti(op string, attempt int) {
	if m.beforeMulti != nil {
		m.beforeMulti(op, attempt)
	}
}

// nextInode hands out inodes from batches of INCRBY nextinode 1024: the
// counter holds the last inode given out (inode 1, the root, is never).
func (m *jfsMeta) nextInode(ctx context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if m.nextIno == 0 || m.nextIno > m.maxIno {
			v, err := m.rdb.IncrBy(ctx, jfsKeyNextInode, jfsInodeBatch).Result()
			if err != nil {
				return 0, err
			}
			m.nextIno, m.maxIno = uint64(v)-jfsInodeBatch+1, uint64(v)
		}
		n := m.nextIno
		m.nextIno++
		if n > jfsRootIno {
			return n, nil
		}
	}
}

// nextSliceID hands out slice ids from batches of INCRBY nextchunk 4096
// (id 0 means a hole and is never given out).
func (m *jfsMeta) nextSliceID(ctx context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if m.nextSlice == 0 || m.nextSlice > m.maxSlice {
			v, err := m.rdb.IncrBy(ctx, jfsKeyNextChunk, jfsSliceBatch).Result()
			if err != nil {
				return 0, err
			}
			m.nextSlice, m.maxSlice = uint64(v)-jfsSliceBatch+1, uint64(v)
		}
		n := m.nextSlice
		m.nextSlice++
		if n > 0 {
			return n, nil
		}
	}
}

// Format writes a new volume: `setting`, the root inode and the counters
// (JuiceFS's format writes setting and i1, its first INCRBYs create the
// counters; they are written here so a check can start from known values).
// d1 appears with the root's first entry: Redis keeps no empty hash.
func (m *jfsMeta) Format(ctx context.Context, f jfsFormat) error {
	if _, err := m.rdb.Get(ctx, jfsKeySetting).Result(); err == nil {
		return fmt.Errorf("format: the volume is already formatted")
	} else if !errors.Is(err, redis.Nil) {
		return err
	}
	data, err := json.MarshalIndent(f, "", "")
	if err != nil {
		return err
	}
	if err := m.rdb.Set(ctx, jfsKeySetting, data, 0).Err(); err != nil {
		return err
	}
	now := time.Now()
	root := jfsAttr{Typ: jfsTypeDir, Mode: 0777, Nlink: 2, Length: 4 << 10, Parent: jfsRootIno}
	root.setAtime(now)
	root.setMtime(now)
	root.setCtime(now)
	if err := m.rdb.Set(ctx, jfsInodeKey(jfsRootIno), root.marshal(), 0).Err(); err != nil {
		return err
	}
	_, err = m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, jfsKeyNextInode, jfsRootIno, 0) // the root is taken
		p.Set(ctx, jfsKeyNextChunk, 0, 0)
		p.Set(ctx, jfsKeyUsedSpace, 0, 0) // the root is not counted
		p.Set(ctx, jfsKeyTotalInodes, 0, 0)
		return nil
	})
	return err
}

// Load reads `setting` as a mount does at start-up.
func (m *jfsMeta) Load(ctx context.Context) (jfsFormat, error) {
	var f jfsFormat
	body, err := m.rdb.Get(ctx, jfsKeySetting).Bytes()
	if err != nil {
		return f, fmt.Errorf("GET setting: %w", err)
	}
	err = json.Unmarshal(body, &f)
	return f, err
}

// NewSession registers a session as a mount does, then loads the lookup
// script and checks its digest.
func (m *jfsMeta) NewSession(ctx context.Context) error {
	sid, err := m.rdb.IncrBy(ctx, jfsKeyNextSession, 1).Result()
	if err != nil {
		return err
	}
	info, _ := json.Marshal(map[string]interface{}{"Version": "1.4.1-replay", "HostName": m.name, "ProcessID": sid})
	_, err = m.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, jfsKeyAllSessions, redis.Z{Score: float64(time.Now().Add(time.Minute).Unix()), Member: strconv.FormatInt(sid, 10)})
		p.HSet(ctx, jfsKeySessionInfos, strconv.FormatInt(sid, 10), info)
		return nil
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.sid = uint64(sid)
	m.mu.Unlock()
	return m.LoadScripts(ctx)
}

// LoadScripts sends SCRIPT LOAD of the lookup script; the digest must be the
// one JuiceFS 1.x gets.
func (m *jfsMeta) LoadScripts(ctx context.Context) error {
	sha, err := m.rdb.ScriptLoad(ctx, jfsLookupScript).Result()
	if err != nil {
		return fmt.Errorf("SCRIPT LOAD lookup: %w", err)
	}
	if sha != jfsLookupSHA {
		return fmt.Errorf("SCRIPT LOAD lookup returned %q, want %s", sha, jfsLookupSHA)
	}
	m.mu.Lock()
	m.shaLookup = sha
	m.mu.Unlock()
	return nil
}

// Mknod creates a file, directory or symlink (target) in parent as doMknod
// does; the inode comes from the prefetched batch first. It returns the new
// inode and the attr written.
func (m *jfsMeta) Mknod(ctx context.Context, parent uint64, name string, typ uint8, mode uint16, uid, gid uint32,
	target string) (uint64, jfsAttr, error) {
	ino, err := m.nextInode(ctx)
	if err != nil {
		return 0, jfsAttr{}, err
	}
	var attr jfsAttr
	err = m.txn(ctx, "mknod", func(tx *redis.Tx, attempt int) error {
		a, err := tx.Get(ctx, jfsInodeKey(parent)).Bytes()
		if errors.Is(err, redis.Nil) {
			return syscall.ENOENT
		} else if err != nil {
			return err
		}
		pattr, err := jfsParseAttr(a)
		if err != nil {
			return fmt.Errorf("parent %d: %w", parent, err)
		}
		if pattr.Typ != jfsTypeDir {
			return syscall.ENOTDIR
		}
		buf, err := tx.HGet(ctx, jfsEntryKey(parent), name).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if err == nil {
			_, found, perr := jfsParseEntry(buf)
			if perr != nil {
				return perr
			}
			if typ == jfsTypeFile || typ == jfsTypeDir {
				if err := tx.Get(ctx, jfsInodeKey(found)).Err(); err != nil && !errors.Is(err, redis.Nil) {
					return err
				}
			}
			return syscall.EEXIST
		}
		now := time.Now()
		attr = jfsAttr{Typ: typ, Mode: mode & 07777, Uid: uid, Gid: gid, Nlink: 1, Parent: parent}
		switch typ {
		case jfsTypeDir:
			attr.Nlink, attr.Length = 2, 4<<10
		case jfsTypeSymlink:
			attr.Length = uint64(len(target))
		}
		attr.setAtime(now)
		attr.setMtime(now)
		attr.setCtime(now)
		if typ == jfsTypeDir {
			pattr.Nlink++
		}
		updateParent := pattr.touchDir(now, typ == jfsTypeDir)
		m.preMulti("mknod", attempt)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, jfsInodeKey(ino), attr.marshal(), 0)
			if updateParent {
				p.Set(ctx, jfsInodeKey(parent), pattr.marshal(), 0)
			}
			if typ == jfsTypeSymlink {
				p.Set(ctx, jfsSymKey(ino), target, 0)
			}
			p.HSet(ctx, jfsEntryKey(parent), name, jfsPackEntry(typ, ino))
			if typ == jfsTypeDir {
				field := strconv.FormatUint(ino, 10)
				p.HSet(ctx, jfsKeyDirUsedInodes, field, "0")
				p.HSet(ctx, jfsKeyDirDataLength, field, "0")
				p.HSet(ctx, jfsKeyDirUsedSpace, field, "0")
			}
			p.IncrBy(ctx, jfsKeyUsedSpace, jfsAlign4K(0))
			p.Incr(ctx, jfsKeyTotalInodes)
			return nil
		})
		return err
	}, jfsInodeKey(parent), jfsEntryKey(parent))
	if err != nil {
		return 0, jfsAttr{}, err
	}
	return ino, attr, nil
}

// Lookup runs the lookup script: EVALSHA sha 2 d<parent> name. It returns
// the inode and its attr (nil when i<ino> is missing); syscall.ENOENT when
// the name is not there; errJfsNotSup for ENOTSUP. NOSCRIPT makes it load
// the script again and retry, as JuiceFS does. Any other error is returned
// as it is (JuiceFS would stop using the script for the life of the mount).
func (m *jfsMeta) Lookup(ctx context.Context, parent uint64, name string) (uint64, []byte, error) {
	for attempt := 0; ; attempt++ {
		m.mu.Lock()
		sha := m.shaLookup
		m.mu.Unlock()
		if sha == "" {
			return 0, nil, fmt.Errorf("lookup: the script is not loaded")
		}
		res, err := m.rdb.EvalSha(ctx, sha, []string{jfsEntryKey(parent), name}).Result()
		if err != nil {
			msg := err.Error()
			switch {
			case strings.Contains(msg, "NOSCRIPT") && attempt < jfsScriptRetries:
				m.scriptReloads.Add(1)
				if err := m.LoadScripts(ctx); err != nil {
					return 0, nil, err
				}
				continue
			case strings.Contains(msg, "ENOENT"):
				return 0, nil, syscall.ENOENT
			case strings.Contains(msg, "ENOTSUP"):
				return 0, nil, errJfsNotSup
			}
			return 0, nil, fmt.Errorf("lookup script: %w", err)
		}
		vals, ok := res.([]interface{})
		if !ok || len(vals) != 2 {
			return 0, nil, fmt.Errorf("lookup script: unexpected reply %T %#v", res, res)
		}
		ino, ok := vals[0].(int64)
		if !ok || ino <= 0 {
			return 0, nil, fmt.Errorf("lookup script: unexpected inode %T %#v", vals[0], vals[0])
		}
		if vals[1] == nil {
			return uint64(ino), nil, nil
		}
		attr, ok := vals[1].(string)
		if !ok {
			return 0, nil, fmt.Errorf("lookup script: unexpected attr %T %#v", vals[1], vals[1])
		}
		return uint64(ino), []byte(attr), nil
	}
}

// LookupPlain is doLookup's fallback: HGET d<parent> name, then GET i<ino>.
// The attr is nil when i<ino> is missing (a corrupt entry to JuiceFS).
func (m *jfsMeta) LookupPlain(ctx context.Context, parent uint64, name string) (uint8, uint64, []byte, error) {
	buf, err := m.rdb.HGet(ctx, jfsEntryKey(parent), name).Bytes()
	if errors.Is(err, redis.Nil) {
		return 0, 0, nil, syscall.ENOENT
	} else if err != nil {
		return 0, 0, nil, err
	}
	typ, ino, err := jfsParseEntry(buf)
	if err != nil {
		return 0, 0, nil, err
	}
	attr, err := m.rdb.Get(ctx, jfsInodeKey(ino)).Bytes()
	if errors.Is(err, redis.Nil) {
		return typ, ino, nil, nil
	}
	return typ, ino, attr, err
}

// GetAttr is doGetAttr: GET i<ino>; syscall.ENOENT when missing.
func (m *jfsMeta) GetAttr(ctx context.Context, ino uint64) ([]byte, error) {
	a, err := m.rdb.Get(ctx, jfsInodeKey(ino)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, syscall.ENOENT
	}
	return a, err
}

// Readlink is doReadlink with noatime: GET s<ino> ("" when missing).
func (m *jfsMeta) Readlink(ctx context.Context, ino uint64) (string, error) {
	s, err := m.rdb.Get(ctx, jfsSymKey(ino)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return s, err
}

// jfsDirEntry is one readdir entry; attr is set by readdirplus (nil when
// i<ino> is missing).
type jfsDirEntry struct {
	Name string
	Typ  uint8
	Ino  uint64
	Attr []byte
}

// Readdir is opendir + doReaddir: GET i<dir> (and GET i<parent> for
// readdirplus), HSCAN d<ino> until the cursor is 0, then (plus) MGET of the i
// keys in batches of 4096, at most two batches at once. A name that HSCAN
// returns twice (which HSCAN may do) is kept once.
func (m *jfsMeta) Readdir(ctx context.Context, ino uint64, plus bool) ([]jfsDirEntry, error) {
	a, err := m.GetAttr(ctx, ino)
	if err != nil {
		return nil, err
	}
	dattr, err := jfsParseAttr(a)
	if err != nil {
		return nil, err
	}
	if dattr.Typ != jfsTypeDir {
		return nil, syscall.ENOTDIR
	}
	if plus && dattr.Parent != ino {
		if _, err := m.GetAttr(ctx, dattr.Parent); err != nil {
			return nil, fmt.Errorf("parent %d: %w", dattr.Parent, err)
		}
	}
	var entries []jfsDirEntry
	seen := map[string]int{}
	var cursor uint64
	for {
		kvs, next, err := m.rdb.HScan(ctx, jfsEntryKey(ino), cursor, "*", jfsHscanCount).Result()
		if err != nil {
			return nil, err
		}
		if len(kvs)%2 != 0 {
			return nil, fmt.Errorf("HSCAN d%d: odd reply length %d", ino, len(kvs))
		}
		for i := 0; i < len(kvs); i += 2 {
			typ, child, err := jfsParseEntry([]byte(kvs[i+1]))
			if err != nil {
				return nil, fmt.Errorf("HSCAN d%d field %q: %w", ino, kvs[i], err)
			}
			if at, dup := seen[kvs[i]]; dup {
				if entries[at].Typ != typ || entries[at].Ino != child {
					return nil, fmt.Errorf("HSCAN d%d returned %q twice with different values", ino, kvs[i])
				}
				continue
			}
			seen[kvs[i]] = len(entries)
			entries = append(entries, jfsDirEntry{Name: kvs[i], Typ: typ, Ino: child})
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	if !plus || len(entries) == 0 {
		return entries, nil
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	errs := make(chan error, len(entries)/jfsReaddirBatch+1)
	for start := 0; start < len(entries); start += jfsReaddirBatch {
		end := start + jfsReaddirBatch
		if end > len(entries) {
			end = len(entries)
		}
		batch := entries[start:end]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			keys := make([]string, len(batch))
			for i, e := range batch {
				keys[i] = jfsInodeKey(e.Ino)
			}
			vals, err := m.rdb.MGet(ctx, keys...).Result()
			if err != nil {
				errs <- err
				return
			}
			if len(vals) != len(keys) {
				errs <- fmt.Errorf("MGET of %d keys returned %d values", len(keys), len(vals))
				return
			}
			for i, v := range vals {
				switch v := v.(type) {
				case nil:
				case string:
					batch[i].Attr = []byte(v)
				default:
					errs <- fmt.Errorf("MGET %s: unexpected %T", keys[i], v)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	return entries, nil
}

// Write appends length bytes at the end of a file as doWrite does: one new
// slice in chunk 0. It returns the new attr and the slice written.
func (m *jfsMeta) Write(ctx context.Context, ino uint64, length uint32) (jfsAttr, []byte, error) {
	id, err := m.nextSliceID(ctx)
	if err != nil {
		return jfsAttr{}, nil, err
	}
	var attr jfsAttr
	var slice []byte
	err = m.txn(ctx, "write", func(tx *redis.Tx, attempt int) error {
		a, err := tx.Get(ctx, jfsInodeKey(ino)).Bytes()
		if errors.Is(err, redis.Nil) {
			return syscall.ENOENT
		} else if err != nil {
			return err
		}
		if attr, err = jfsParseAttr(a); err != nil {
			return err
		}
		if attr.Typ != jfsTypeFile {
			return syscall.EPERM
		}
		off := attr.Length
		if off+uint64(length) > jfsChunkSize {
			return syscall.EFBIG // the replay stays in chunk 0
		}
		newLength := off + uint64(length)
		space := jfsAlign4K(newLength) - jfsAlign4K(attr.Length)
		attr.Length = newLength
		now := time.Now()
		attr.setMtime(now)
		attr.setCtime(now)
		slice = jfsMarshalSlice(uint32(off), id, length, 0, length)
		m.preMulti("write", attempt)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.RPush(ctx, jfsChunkKey(ino, 0), slice)
			p.Set(ctx, jfsInodeKey(ino), attr.marshal(), 0)
			if space > 0 {
				p.IncrBy(ctx, jfsKeyUsedSpace, space)
			}
			return nil
		})
		return err
	}, jfsInodeKey(ino))
	return attr, slice, err
}

// SetXattr is doSetXattr with no flags: txn(x): MULTI HSET EXEC.
func (m *jfsMeta) SetXattr(ctx context.Context, ino uint64, name, value string) error {
	return m.txn(ctx, "setxattr", func(tx *redis.Tx, attempt int) error {
		m.preMulti("setxattr", attempt)
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, jfsXattrKey(ino), name, value)
			return nil
		})
		return err
	}, jfsXattrKey(ino))
}

// queueDelete queues in p the deletion of an inode whose last link goes, as
// doUnlink does for a file that is not open (with the counters, or leaving
// them to the caller); it returns the usedSpace and totalInodes deltas.
func (m *jfsMeta) queueDelete(ctx context.Context, p redis.Pipeliner, ino uint64, typ uint8, attr *jfsAttr,
	now time.Time, counters bool) (int64, int64) {
	var space int64
	switch typ {
	case jfsTypeFile:
		p.ZAdd(ctx, jfsKeyDelfiles, redis.Z{Score: float64(now.Unix()), Member: fmt.Sprintf("%d:%d", ino, attr.Length)})
		p.Del(ctx, jfsInodeKey(ino))
		space = -jfsAlign4K(attr.Length)
	case jfsTypeSymlink:
		p.Del(ctx, jfsSymKey(ino))
		fallthrough
	default:
		p.Del(ctx, jfsInodeKey(ino))
		space = -jfsAlign4K(0)
	}
	if counters {
		p.IncrBy(ctx, jfsKeyUsedSpace, space)
		p.Decr(ctx, jfsKeyTotalInodes)
	}
	p.Del(ctx, jfsXattrKey(ino))
	return space, -1
}

// Unlink removes a file or symlink as doUnlink does (no trash, never open,
// no hard links). It returns the inode, its type and its last attr.
func (m *jfsMeta) Unlink(ctx context.Context, parent uint64, name string) (uint64, uint8, jfsAttr, error) {
	var ino uint64
	var typ uint8
	var attr jfsAttr
	err := m.txn(ctx, "unlink", func(tx *redis.Tx, attempt int) error {
		attr = jfsAttr{}
		buf, err := tx.HGet(ctx, jfsEntryKey(parent), name).Bytes()
		if errors.Is(err, redis.Nil) {
			return syscall.ENOENT
		} else if err != nil {
			return err
		}
		if typ, ino, err = jfsParseEntry(buf); err != nil {
			return err
		}
		if typ == jfsTypeDir {
			return syscall.EPERM
		}
		if err := tx.Watch(ctx, jfsInodeKey(ino)).Err(); err != nil {
			return err
		}
		rs, err := tx.MGet(ctx, jfsInodeKey(parent), jfsInodeKey(ino)).Result()
		if err != nil {
			return err
		}
		if rs[0] == nil {
			return syscall.ENOENT
		}
		pattr, err := jfsParseAttr([]byte(rs[0].(string)))
		if err != nil {
			return err
		}
		if pattr.Typ != jfsTypeDir {
			return syscall.ENOTDIR
		}
		now := time.Now()
		updateParent := pattr.touchDir(now, false)
		if rs[1] != nil {
			if attr, err = jfsParseAttr([]byte(rs[1].(string))); err != nil {
				return err
			}
			attr.setCtime(now)
			attr.Nlink--
		}
		m.preMulti("unlink", attempt)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, jfsEntryKey(parent), name)
			if updateParent {
				p.Set(ctx, jfsInodeKey(parent), pattr.marshal(), 0)
			}
			if attr.Nlink > 0 {
				p.Set(ctx, jfsInodeKey(ino), attr.marshal(), 0)
			} else {
				m.queueDelete(ctx, p, ino, typ, &attr, now, true)
			}
			return nil
		})
		return err
	}, jfsInodeKey(parent), jfsEntryKey(parent))
	return ino, typ, attr, err
}

// Rmdir removes an empty directory as doRmdir does (no trash).
func (m *jfsMeta) Rmdir(ctx context.Context, parent uint64, name string) (uint64, error) {
	var ino uint64
	err := m.txn(ctx, "rmdir", func(tx *redis.Tx, attempt int) error {
		buf, err := tx.HGet(ctx, jfsEntryKey(parent), name).Bytes()
		if errors.Is(err, redis.Nil) {
			return syscall.ENOENT
		} else if err != nil {
			return err
		}
		typ, child, err := jfsParseEntry(buf)
		if err != nil {
			return err
		}
		if typ != jfsTypeDir {
			return syscall.ENOTDIR
		}
		ino = child
		if err := tx.Watch(ctx, jfsInodeKey(ino), jfsEntryKey(ino)).Err(); err != nil {
			return err
		}
		rs, err := tx.MGet(ctx, jfsInodeKey(parent), jfsInodeKey(ino)).Result()
		if err != nil {
			return err
		}
		if rs[0] == nil {
			return syscall.ENOENT
		}
		pattr, err := jfsParseAttr([]byte(rs[0].(string)))
		if err != nil {
			return err
		}
		if pattr.Typ != jfsTypeDir {
			return syscall.ENOTDIR
		}
		now := time.Now()
		pattr.Nlink--
		pattr.touchDir(now, true)
		n, err := tx.HLen(ctx, jfsEntryKey(ino)).Result()
		if err != nil {
			return err
		}
		if n > 0 {
			return syscall.ENOTEMPTY
		}
		m.preMulti("rmdir", attempt)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, jfsEntryKey(parent), name)
			p.Set(ctx, jfsInodeKey(parent), pattr.marshal(), 0)
			p.Del(ctx, jfsInodeKey(ino))
			p.Del(ctx, jfsXattrKey(ino))
			p.IncrBy(ctx, jfsKeyUsedSpace, -jfsAlign4K(0))
			p.Decr(ctx, jfsKeyTotalInodes)
			field := strconv.FormatUint(ino, 10)
			for _, k := range jfsDirStatKeys {
				p.HDel(ctx, k, field)
			}
			return nil
		})
		return err
	}, jfsInodeKey(parent), jfsEntryKey(parent))
	return ino, err
}

// jfsRenamed is what Rename did: the inode moved and its new attr, and the
// target it replaced (0 when none) with that target's last attr.
type jfsRenamed struct {
	Ino          uint64
	Typ          uint8
	Attr         jfsAttr
	Replaced     uint64
	ReplacedTyp  uint8
	ReplacedAttr jfsAttr
}

// Rename is doRename without flags (a file target is replaced, a directory
// target must be empty), no trash.
func (m *jfsMeta) Rename(ctx context.Context, ps uint64, ns string, pd uint64, nd string) (jfsRenamed, error) {
	var r jfsRenamed
	err := m.txn(ctx, "rename", func(tx *redis.Tx, attempt int) error {
		r = jfsRenamed{}
		buf, err := tx.HGet(ctx, jfsEntryKey(ps), ns).Bytes()
		if errors.Is(err, redis.Nil) {
			return syscall.ENOENT
		} else if err != nil {
			return err
		}
		typ, ino, err := jfsParseEntry(buf)
		if err != nil {
			return err
		}
		r.Ino, r.Typ = ino, typ
		if ps == pd && ns == nd {
			return nil
		}
		watch := []string{jfsInodeKey(ino)}
		var dtyp uint8
		var dino uint64
		dbuf, err := tx.HGet(ctx, jfsEntryKey(pd), nd).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if err == nil {
			if dtyp, dino, err = jfsParseEntry(dbuf); err != nil {
				return err
			}
			watch = append(watch, jfsInodeKey(dino))
			if dtyp == jfsTypeDir {
				watch = append(watch, jfsEntryKey(dino))
			}
		}
		if err := tx.Watch(ctx, watch...).Err(); err != nil {
			return err
		}
		if dino > 0 {
			if dino == ino {
				return nil
			}
			if typ == jfsTypeDir && dtyp != jfsTypeDir {
				return syscall.ENOTDIR
			}
			if typ != jfsTypeDir && dtyp == jfsTypeDir {
				return syscall.EISDIR
			}
		}
		keys := []string{jfsInodeKey(ps), jfsInodeKey(pd), jfsInodeKey(ino)}
		if dino > 0 {
			keys = append(keys, jfsInodeKey(dino))
		}
		rs, err := tx.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		if rs[0] == nil || rs[1] == nil || rs[2] == nil {
			return syscall.ENOENT
		}
		var sattr, dattr, iattr, tattr jfsAttr
		if sattr, err = jfsParseAttr([]byte(rs[0].(string))); err != nil {
			return err
		}
		if dattr, err = jfsParseAttr([]byte(rs[1].(string))); err != nil {
			return err
		}
		if sattr.Typ != jfsTypeDir || dattr.Typ != jfsTypeDir {
			return syscall.ENOTDIR
		}
		if ino == pd || ino == dattr.Parent {
			return syscall.EPERM
		}
		if iattr, err = jfsParseAttr([]byte(rs[2].(string))); err != nil {
			return err
		}
		now := time.Now()
		var supdate, dupdate bool
		if dino > 0 {
			if rs[3] != nil {
				if tattr, err = jfsParseAttr([]byte(rs[3].(string))); err != nil {
					return err
				}
			}
			tattr.setCtime(now)
			if dtyp == jfsTypeDir {
				n, err := tx.HLen(ctx, jfsEntryKey(dino)).Result()
				if err != nil {
					return err
				}
				if n != 0 {
					return syscall.ENOTEMPTY
				}
				dattr.Nlink--
				dupdate = true
			} else {
				tattr.Nlink--
			}
		}
		if ps != pd && typ == jfsTypeDir {
			iattr.Parent = pd
			sattr.Nlink--
			dattr.Nlink++
			supdate, dupdate = true, true
		} else if ps != pd && iattr.Parent > 0 {
			iattr.Parent = pd
		}
		supdate = sattr.touchDir(now, supdate)
		dupdate = dattr.touchDir(now, dupdate)
		iattr.setCtime(now)
		m.preMulti("rename", attempt)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, jfsEntryKey(ps), ns)
			if dino > 0 {
				if dtyp != jfsTypeDir && tattr.Nlink > 0 {
					p.Set(ctx, jfsInodeKey(dino), tattr.marshal(), 0)
				} else {
					m.queueDelete(ctx, p, dino, dtyp, &tattr, now, true)
					if dtyp == jfsTypeDir {
						field := strconv.FormatUint(dino, 10)
						p.HDel(ctx, "dirQuota", field)
						p.HDel(ctx, "dirQuotaUsedSpace", field)
						p.HDel(ctx, "dirQuotaUsedInodes", field)
					}
				}
			}
			if ps != pd && supdate {
				p.Set(ctx, jfsInodeKey(ps), sattr.marshal(), 0)
			}
			p.Set(ctx, jfsInodeKey(ino), iattr.marshal(), 0)
			p.HSet(ctx, jfsEntryKey(pd), nd, buf)
			if dupdate {
				p.Set(ctx, jfsInodeKey(pd), dattr.marshal(), 0)
			}
			return nil
		})
		if err == nil {
			r.Attr = iattr
			r.Replaced, r.ReplacedTyp, r.ReplacedAttr = dino, dtyp, tattr
		}
		return err
	}, jfsInodeKey(ps), jfsEntryKey(ps), jfsInodeKey(pd), jfsEntryKey(pd))
	return r, err
}

// jfsUnlinked is one entry BatchUnlink removed.
type jfsUnlinked struct {
	Name string
	Ino  uint64
	Typ  uint8
	Attr jfsAttr // the last attr (Nlink 0)
}

// BatchUnlink removes files and symlinks of one directory as doBatchUnlink
// does: transactions of 250 entries. Names that are not there are skipped.
func (m *jfsMeta) BatchUnlink(ctx context.Context, parent uint64, names []string) ([]jfsUnlinked, error) {
	var all []jfsUnlinked
	for start := 0; start < len(names); start += jfsBatchUnlink {
		end := start + jfsBatchUnlink
		if end > len(names) {
			end = len(names)
		}
		done, err := m.batchUnlink(ctx, parent, names[start:end])
		all = append(all, done...)
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

func (m *jfsMeta) batchUnlink(ctx context.Context, parent uint64, names []string) ([]jfsUnlinked, error) {
	var done []jfsUnlinked
	err := m.txn(ctx, "batchUnlink", func(tx *redis.Tx, attempt int) error {
		done = done[:0]
		a, err := tx.Get(ctx, jfsInodeKey(parent)).Bytes()
		if errors.Is(err, redis.Nil) {
			return syscall.ENOENT
		} else if err != nil {
			return err
		}
		pattr, err := jfsParseAttr(a)
		if err != nil {
			return err
		}
		if pattr.Typ != jfsTypeDir {
			return syscall.ENOTDIR
		}
		fields := make([]string, len(names))
		copy(fields, names)
		vals, err := tx.HMGet(ctx, jfsEntryKey(parent), fields...).Result()
		if err != nil {
			return err
		}
		var watch []string
		seen := map[uint64]bool{}
		for i, v := range vals {
			if v == nil {
				continue
			}
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("HMGET d%d %s: unexpected %T", parent, names[i], v)
			}
			typ, ino, err := jfsParseEntry([]byte(s))
			if err != nil {
				return err
			}
			if typ == jfsTypeDir {
				return syscall.EPERM
			}
			done = append(done, jfsUnlinked{Name: names[i], Ino: ino, Typ: typ})
			if !seen[ino] {
				seen[ino] = true
				watch = append(watch, jfsInodeKey(ino))
			}
		}
		if len(done) == 0 {
			return nil
		}
		if err := tx.Watch(ctx, watch...).Err(); err != nil {
			return err
		}
		rs, err := tx.MGet(ctx, watch...).Result()
		if err != nil {
			return err
		}
		attrs := map[uint64]*jfsAttr{}
		now := time.Now()
		for i, v := range rs {
			if v == nil {
				continue
			}
			ino, _ := strconv.ParseUint(watch[i][1:], 10, 64)
			at, err := jfsParseAttr([]byte(v.(string)))
			if err != nil {
				return err
			}
			attrs[ino] = &at
		}
		for i := range done {
			if at := attrs[done[i].Ino]; at != nil {
				at.Nlink--
				at.setCtime(now)
				done[i].Attr = *at
			}
		}
		updateParent := pattr.touchDir(now, false)
		m.preMulti("batchUnlink", attempt)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			removed := make([]string, len(done))
			for i, d := range done {
				removed[i] = d.Name
			}
			p.HDel(ctx, jfsEntryKey(parent), removed...)
			if updateParent {
				p.Set(ctx, jfsInodeKey(parent), pattr.marshal(), 0)
			}
			var space, inodes int64
			for _, d := range done {
				at := attrs[d.Ino]
				if at == nil {
					continue // no attr: JuiceFS only drops the entry
				}
				if at.Nlink > 0 {
					p.Set(ctx, jfsInodeKey(d.Ino), at.marshal(), 0)
					continue
				}
				s, n := m.queueDelete(ctx, p, d.Ino, d.Typ, at, now, false)
				space += s
				inodes += n
			}
			if space != 0 {
				p.IncrBy(ctx, jfsKeyUsedSpace, space)
			}
			if inodes != 0 {
				p.DecrBy(ctx, jfsKeyTotalInodes, -inodes)
			}
			return nil
		})
		return err
	}, jfsInodeKey(parent), jfsEntryKey(parent))
	return done, err
}

// jfsCloneSrc names one file or symlink to clone into the destination
// directory under Name.
type jfsCloneSrc struct {
	Ino  uint64
	Name string
}

// jfsCloned is one clone made: its new inode and attr.
type jfsCloned struct {
	Name   string
	SrcIno uint64
	Ino    uint64
	Attr   jfsAttr
}

// BatchClone clones files and symlinks into dst as doBatchClone does:
// transactions of up to 1000 entries; each copies the attr (new parent, new
// times, one link), the xattrs, the chunk lists (one more reference in
// sliceRef for each slice) and the symlink target.
func (m *jfsMeta) BatchClone(ctx context.Context, dst uint64, srcs []jfsCloneSrc) ([]jfsCloned, error) {
	var all []jfsCloned
	for start := 0; start < len(srcs); start += jfsBatchClone {
		end := start + jfsBatchClone
		if end > len(srcs) {
			end = len(srcs)
		}
		done, err := m.batchClone(ctx, dst, srcs[start:end])
		if err != nil {
			return all, err
		}
		all = append(all, done...)
	}
	return all, nil
}

func (m *jfsMeta) batchClone(ctx context.Context, dst uint64, srcs []jfsCloneSrc) ([]jfsCloned, error) {
	out := make([]jfsCloned, len(srcs))
	var inos []uint64 // distinct sources, in order
	seen := map[uint64]bool{}
	watch := []string{jfsInodeKey(dst)}
	for i, s := range srcs {
		ino, err := m.nextInode(ctx)
		if err != nil {
			return nil, err
		}
		out[i] = jfsCloned{Name: s.Name, SrcIno: s.Ino, Ino: ino}
		if !seen[s.Ino] {
			seen[s.Ino] = true
			inos = append(inos, s.Ino)
			watch = append(watch, jfsInodeKey(s.Ino), jfsXattrKey(s.Ino))
		}
	}
	err := m.txn(ctx, "batchClone", func(tx *redis.Tx, attempt int) error {
		a, err := tx.Get(ctx, jfsInodeKey(dst)).Bytes()
		if errors.Is(err, redis.Nil) {
			return syscall.ENOENT
		} else if err != nil {
			return err
		}
		pattr, err := jfsParseAttr(a)
		if err != nil {
			return err
		}
		if pattr.Typ != jfsTypeDir {
			return syscall.ENOTDIR
		}
		exists := make([]*redis.BoolCmd, len(srcs))
		if _, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, s := range srcs {
				exists[i] = p.HExists(ctx, jfsEntryKey(dst), s.Name)
			}
			return nil
		}); err != nil {
			return err
		}
		for i := range srcs {
			if exists[i].Val() {
				return syscall.EEXIST
			}
		}
		keys := make([]string, len(inos))
		for i, ino := range inos {
			keys[i] = jfsInodeKey(ino)
		}
		rs, err := tx.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		attrs := map[uint64]jfsAttr{}
		for i, v := range rs {
			if v == nil {
				return syscall.ENOENT
			}
			at, err := jfsParseAttr([]byte(v.(string)))
			if err != nil {
				return err
			}
			if at.Typ == jfsTypeDir {
				return syscall.EINVAL
			}
			attrs[inos[i]] = at
		}
		xattrs := map[uint64]*redis.MapStringStringCmd{}
		chunks := map[uint64][]*redis.StringSliceCmd{}
		targets := map[uint64]*redis.StringCmd{}
		if _, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, ino := range inos {
				at := attrs[ino]
				xattrs[ino] = p.HGetAll(ctx, jfsXattrKey(ino))
				switch at.Typ {
				case jfsTypeFile:
					if at.Length > 0 {
						for indx := uint32(0); uint64(indx) <= at.Length/jfsChunkSize; indx++ {
							chunks[ino] = append(chunks[ino], p.LRange(ctx, jfsChunkKey(ino, indx), 0, -1))
						}
					}
				case jfsTypeSymlink:
					targets[ino] = p.Get(ctx, jfsSymKey(ino))
				}
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		now := time.Now()
		var space, inodes int64
		refs := map[string]int64{}
		for i := range out {
			at := attrs[out[i].SrcIno]
			at.Parent = dst
			at.Nlink = 1
			at.setAtime(now)
			at.setMtime(now)
			at.setCtime(now)
			out[i].Attr = at
			space += jfsAlign4K(at.Length)
			inodes++
			for _, c := range chunks[out[i].SrcIno] {
				for _, s := range c.Val() {
					_, id, size, _, _, err := jfsParseSlice([]byte(s))
					if err != nil {
						return err
					}
					if id > 0 {
						refs[jfsSliceKey(id, size)]++
					}
				}
			}
		}
		pattr.touchDir(now, true)
		m.preMulti("batchClone", attempt)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range out {
				p.Set(ctx, jfsInodeKey(c.Ino), c.Attr.marshal(), 0)
				p.HSet(ctx, jfsEntryKey(dst), c.Name, jfsPackEntry(c.Attr.Typ, c.Ino))
				if x := xattrs[c.SrcIno].Val(); len(x) > 0 {
					p.HMSet(ctx, jfsXattrKey(c.Ino), x)
				}
				for indx, cmd := range chunks[c.SrcIno] {
					if vals := cmd.Val(); len(vals) > 0 {
						args := make([]interface{}, len(vals))
						for j, v := range vals {
							args[j] = v
						}
						p.RPush(ctx, jfsChunkKey(c.Ino, uint32(indx)), args...)
					}
				}
				if tcmd := targets[c.SrcIno]; tcmd != nil {
					p.Set(ctx, jfsSymKey(c.Ino), tcmd.Val(), 0)
				}
			}
			p.Set(ctx, jfsInodeKey(dst), pattr.marshal(), 0)
			p.IncrBy(ctx, jfsKeyUsedSpace, space)
			p.IncrBy(ctx, jfsKeyTotalInodes, inodes)
			for k, n := range refs {
				p.HIncrBy(ctx, jfsKeySliceRef, k, n)
			}
			return nil
		})
		return err
	}, watch...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PipelinedCreate fills a directory fast: plain pipelines (no WATCH) of
// SET i<new> + HSET d<parent> per file, 1000 files per pipeline, then one of
// INCRBY usedSpace and INCRBY totalInodes. Not a JuiceFS operation: the
// state it leaves is the one JuiceFS's creates would.
func (m *jfsMeta) PipelinedCreate(ctx context.Context, parent uint64, names []string, mode uint16, uid, gid uint32) ([]uint64, []jfsAttr, error) {
	inos := make([]uint64, len(names))
	attrs := make([]jfsAttr, len(names))
	const per = 1000
	for start := 0; start < len(names); start += per {
		end := start + per
		if end > len(names) {
			end = len(names)
		}
		now := time.Now()
		for i := start; i < end; i++ {
			ino, err := m.nextInode(ctx)
			if err != nil {
				return nil, nil, err
			}
			inos[i] = ino
			attrs[i] = jfsAttr{Typ: jfsTypeFile, Mode: mode, Uid: uid, Gid: gid, Nlink: 1, Parent: parent}
			attrs[i].setAtime(now)
			attrs[i].setMtime(now)
			attrs[i].setCtime(now)
		}
		cmds, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < end; i++ {
				p.Set(ctx, jfsInodeKey(inos[i]), attrs[i].marshal(), 0)
				p.HSet(ctx, jfsEntryKey(parent), names[i], jfsPackEntry(jfsTypeFile, inos[i]))
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		for i, c := range cmds {
			if c.Err() != nil {
				return nil, nil, fmt.Errorf("pipelined create, command %d: %w", i, c.Err())
			}
		}
	}
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.IncrBy(ctx, jfsKeyUsedSpace, jfsAlign4K(0)*int64(len(names)))
		p.IncrBy(ctx, jfsKeyTotalInodes, int64(len(names)))
		return nil
	})
	return inos, attrs, err
}

// Counters reads usedSpace and totalInodes as statfs does.
func (m *jfsMeta) Counters(ctx context.Context) (usedSpace, totalInodes int64, err error) {
	if usedSpace, err = m.rdb.Get(ctx, jfsKeyUsedSpace).Int64(); err != nil {
		return
	}
	totalInodes, err = m.rdb.Get(ctx, jfsKeyTotalInodes).Int64()
	return
}
