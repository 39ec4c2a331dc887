package interop

// go-redis v9 (the client library JuiceFS uses) against sidecache. Each test
// starts its own redis-server and proxy (harness_test.go). Clients use
// go-redis's defaults — protocol 3, so the handshake is HELLO 3 [AUTH] SETNAME,
// then a pipeline of SELECT and CLIENT SETNAME, then CLIENT SETINFO — with
// DB 1 and a client name, as JuiceFS connects to redis://host:port/1.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var protocols = []int{3, 2}

func withProto(p int) func(*redis.Options) {
	return func(o *redis.Options) { o.Protocol = p }
}

// checkReplyTypes checks that the connection speaks the protocol it asked for,
// through reply types that differ between RESP2 and RESP3: HGETALL is a map
// in RESP3 and a flat array in RESP2; ZSCORE is a double in RESP3 and a bulk
// string in RESP2. A server or proxy that refused HELLO 3 leaves go-redis on
// RESP2 silently, so this is what tells that the HELLO 3 really worked.
func checkReplyTypes(ctx context.Context, t *testing.T, c *redis.Client, proto int) {
	t.Helper()
	if err := c.HSet(ctx, "rt:h", "f1", "v1", "f2", "v2").Err(); err != nil {
		t.Fatalf("HSET: %v", err)
	}
	if err := c.ZAdd(ctx, "rt:z", redis.Z{Score: 1.5, Member: "m"}).Err(); err != nil {
		t.Fatalf("ZADD: %v", err)
	}
	h, err := c.Do(ctx, "HGETALL", "rt:h").Result()
	if err != nil {
		t.Fatalf("HGETALL: %v", err)
	}
	z, err := c.Do(ctx, "ZSCORE", "rt:z", "m").Result()
	if err != nil {
		t.Fatalf("ZSCORE: %v", err)
	}
	switch proto {
	case 3:
		m, ok := h.(map[interface{}]interface{})
		if !ok {
			t.Fatalf("RESP3 HGETALL: got %T %v, want a map (did HELLO 3 fail, leaving the connection on RESP2?)", h, h)
		}
		if len(m) != 2 || m["f1"] != "v1" || m["f2"] != "v2" {
			t.Errorf("RESP3 HGETALL: got %v", m)
		}
		if f, ok := z.(float64); !ok || f != 1.5 {
			t.Errorf("RESP3 ZSCORE: got %T %v, want double 1.5", z, z)
		}
	case 2:
		a, ok := h.([]interface{})
		if !ok {
			t.Fatalf("RESP2 HGETALL: got %T %v, want an array", h, h)
		}
		if len(a) != 4 {
			t.Errorf("RESP2 HGETALL: got %v", a)
		}
		if s, ok := z.(string); !ok || s != "1.5" {
			t.Errorf("RESP2 ZSCORE: got %T %v, want bulk string \"1.5\"", z, z)
		}
	}
	// The typed API must read both shapes.
	hm, err := c.HGetAll(ctx, "rt:h").Result()
	if err != nil || !reflect.DeepEqual(hm, map[string]string{"f1": "v1", "f2": "v2"}) {
		t.Errorf("HGetAll: %v %v", hm, err)
	}
}

// TestHandshake: go-redis's default handshake (HELLO 3, SELECT 1, CLIENT
// SETNAME, CLIENT SETINFO, and on this Redis CLIENT MAINT_NOTIFICATIONS is
// not sent for a standalone client) is accepted, the connection is RESP3 or
// RESP2 as asked, the name is set, and data lands in the selected database.
func TestHandshake(t *testing.T) {
	for _, proto := range protocols {
		proto := proto
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			ctx := testCtx(t, 30*time.Second)
			c := e.client(withProto(proto))
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("PING through the proxy: %v", err)
			}
			checkReplyTypes(ctx, t, c, proto)

			name, err := c.ClientGetName(ctx).Result()
			if err != nil || name != c.Options().ClientName {
				t.Errorf("CLIENT GETNAME: got %q, %v; want %q", name, err, c.Options().ClientName)
			}

			// Written in DB 1 through the proxy: in DB 1 on Redis, not in DB 0.
			key := fmt.Sprintf("hs:%d", proto)
			if err := c.Set(ctx, key, "db1-value", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			if v, err := e.direct(1).Get(ctx, key).Result(); err != nil || v != "db1-value" {
				t.Errorf("Redis DB 1 %s: got %q, %v; want db1-value", key, v, err)
			}
			if n, err := e.direct(0).Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("Redis DB 0 must not have %s: EXISTS=%d, %v", key, n, err)
			}
			// Written in DB 1 on Redis: read through the proxy.
			if err := e.direct(1).Set(ctx, key+":direct", "from-redis", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, key+":direct").Result(); err != nil || v != "from-redis" {
				t.Errorf("GET through the proxy of a key set directly in DB 1: %q, %v", v, err)
			}

			// Many connections at once: each one goes through the handshake.
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for i := 0; i < 64; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					k := fmt.Sprintf("%s:conc:%d", key, i)
					if err := c.Set(ctx, k, i, 0).Err(); err != nil {
						errs <- err
						return
					}
					v, err := c.Get(ctx, k).Int()
					if err != nil || v != i {
						errs <- fmt.Errorf("GET %s: %d, %v", k, v, err)
					}
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if st := c.PoolStats(); st.TotalConns < 2 {
				t.Logf("note: only %d pooled connection(s) were opened", st.TotalConns)
			}
		})
	}
}

// TestDatabasesAreSeparate: clients of DB 0 (no SELECT), 1 and 2 through the
// same proxy see their own values of the same key.
func TestDatabasesAreSeparate(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := testCtx(t, 30*time.Second)
	clients := map[int]*redis.Client{}
	for _, db := range []int{0, 1, 2} {
		db := db
		clients[db] = e.client(func(o *redis.Options) { o.DB = db })
	}
	for round := 0; round < 2; round++ { // the second round can be served from a cache
		for db, c := range clients {
			if round == 0 {
				if err := c.Set(ctx, "i100", fmt.Sprintf("db%d", db), 0).Err(); err != nil {
					t.Fatalf("SET db %d: %v", db, err)
				}
			}
		}
		for db, c := range clients {
			if v, err := c.Get(ctx, "i100").Result(); err != nil || v != fmt.Sprintf("db%d", db) {
				t.Errorf("round %d: DB %d GET i100: %q, %v", round, db, v, err)
			}
			if v, err := e.direct(db).Get(ctx, "i100").Result(); err != nil || v != fmt.Sprintf("db%d", db) {
				t.Errorf("round %d: Redis DB %d GET i100: %q, %v", round, db, v, err)
			}
		}
	}
}

// TestPipelined: 1000 commands in one go-redis pipeline; every reply in
// order. Each of 250 rounds is GET (nil), SET, GET (the new value), INCR, on
// keys shaped like JuiceFS inode keys so a cache would be involved.
func TestPipelined(t *testing.T) {
	for _, proto := range protocols {
		proto := proto
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			ctx := testCtx(t, 60*time.Second)
			c := e.client(withProto(proto))
			const rounds = 250
			type round struct {
				get1 *redis.StringCmd
				set  *redis.StatusCmd
				get2 *redis.StringCmd
				incr *redis.IntCmd
			}
			rs := make([]round, rounds)
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := range rs {
					k := fmt.Sprintf("i%d", 1000+i)
					rs[i].get1 = p.Get(ctx, k)
					rs[i].set = p.Set(ctx, k, "v"+strconv.Itoa(i), 0)
					rs[i].get2 = p.Get(ctx, k)
					rs[i].incr = p.Incr(ctx, "pipe:counter")
				}
				return nil
			})
			// The first GETs return nil, so Pipelined reports redis.Nil.
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("Pipelined: %v", err)
			}
			if len(cmds) != 4*rounds {
				t.Fatalf("Pipelined returned %d commands, want %d", len(cmds), 4*rounds)
			}
			bad := 0
			for i, r := range rs {
				want := "v" + strconv.Itoa(i)
				if err := r.get1.Err(); !errors.Is(err, redis.Nil) {
					t.Errorf("round %d: first GET: %q, %v; want nil", i, r.get1.Val(), err)
					bad++
				}
				if err := r.set.Err(); err != nil || r.set.Val() != "OK" {
					t.Errorf("round %d: SET: %q, %v", i, r.set.Val(), err)
					bad++
				}
				if v, err := r.get2.Result(); err != nil || v != want {
					t.Errorf("round %d: GET after SET: %q, %v; want %q", i, v, err, want)
					bad++
				}
				if v, err := r.incr.Result(); err != nil || v != int64(i+1) {
					t.Errorf("round %d: INCR: %d, %v; want %d (replies out of order?)", i, v, err, i+1)
					bad++
				}
				if bad > 20 {
					t.Fatal("too many errors")
				}
			}
			// And Redis has them.
			if v, err := e.direct(1).Get(ctx, "i1249").Result(); err != nil || v != "v249" {
				t.Errorf("Redis DB 1 i1249: %q, %v", v, err)
			}
			if v, err := e.direct(1).Get(ctx, "pipe:counter").Int(); err != nil || v != rounds {
				t.Errorf("Redis DB 1 pipe:counter: %d, %v", v, err)
			}
		})
	}
}

// TestTxPipelined: MULTI ... EXEC through go-redis's TxPipelined, whose
// replies are read from EXEC; and a transaction that Redis aborts
// (EXECABORT) applies nothing.
func TestTxPipelined(t *testing.T) {
	for _, proto := range protocols {
		proto := proto
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			ctx := testCtx(t, 30*time.Second)
			c := e.client(withProto(proto))
			if err := c.Set(ctx, "i7", "before", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, _ := c.Get(ctx, "i7").Result(); v != "before" { // may fill a cache
				t.Fatalf("GET i7: %q", v)
			}
			var get1, get2 *redis.StringCmd
			var incr *redis.IntCmd
			var hset *redis.IntCmd
			var hget *redis.StringCmd
			cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				get1 = p.Get(ctx, "i7")
				p.Set(ctx, "i7", "after", 0)
				get2 = p.Get(ctx, "i7")
				incr = p.IncrBy(ctx, "tx:counter", 5)
				hset = p.HSet(ctx, "d1", "name", "42")
				hget = p.HGet(ctx, "d1", "name")
				return nil
			})
			if err != nil {
				t.Fatalf("TxPipelined: %v", err)
			}
			if len(cmds) != 6 {
				t.Fatalf("TxPipelined returned %d commands, want 6", len(cmds))
			}
			if v, err := get1.Result(); err != nil || v != "before" {
				t.Errorf("GET in tx before SET: %q, %v", v, err)
			}
			if v, err := get2.Result(); err != nil || v != "after" {
				t.Errorf("GET in tx after SET: %q, %v", v, err)
			}
			if v, err := incr.Result(); err != nil || v != 5 {
				t.Errorf("INCRBY in tx: %d, %v", v, err)
			}
			if v, err := hset.Result(); err != nil || v != 1 {
				t.Errorf("HSET in tx: %d, %v", v, err)
			}
			if v, err := hget.Result(); err != nil || v != "42" {
				t.Errorf("HGET in tx: %q, %v", v, err)
			}
			// After EXEC, reads through the proxy see the transaction's writes.
			if v, err := c.Get(ctx, "i7").Result(); err != nil || v != "after" {
				t.Errorf("GET i7 after EXEC: %q, %v; want after", v, err)
			}
			if v, err := e.direct(1).Get(ctx, "i7").Result(); err != nil || v != "after" {
				t.Errorf("Redis DB 1 i7 after EXEC: %q, %v", v, err)
			}

			// A command Redis refuses while queueing (wrong arity) aborts the
			// whole transaction: EXECABORT, and the SET before it is not applied.
			_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "i7", "aborted", 0)
				p.Do(ctx, "SET", "i7") // wrong number of arguments
				return nil
			})
			if err == nil || !strings.Contains(err.Error(), "EXECABORT") && !strings.Contains(err.Error(), "wrong number") {
				t.Errorf("aborted transaction: err %v, want EXECABORT", err)
			}
			if v, err := c.Get(ctx, "i7").Result(); err != nil || v != "after" {
				t.Errorf("GET i7 after EXECABORT: %q, %v; want after", v, err)
			}
			// The connection is usable afterwards.
			if err := c.Ping(ctx).Err(); err != nil {
				t.Errorf("PING after EXECABORT: %v", err)
			}
		})
	}
}

// TestWatchRetries: goroutines increment one counter with optimistic locking
// (WATCH, GET, MULTI SET EXEC), retrying on redis.TxFailedErr as JuiceFS's
// txn does. No increment may be lost: a GET served from a cache while WATCH
// is active, or a WATCH that does not reach the connection that runs EXEC,
// shows up as a final value below N*100.
func TestWatchRetries(t *testing.T) {
	for _, proto := range protocols {
		proto := proto
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			ctx := testCtx(t, 120*time.Second)
			c := e.client(withProto(proto))
			const (
				workers    = 8
				perWorker  = 100
				maxRetries = 2000 // per increment; far more than contention needs
				key        = "i4242"
			)
			if err := c.Set(ctx, key, 0, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, key).Int(); err != nil || v != 0 { // a cache may now hold it
				t.Fatalf("GET %s: %d, %v", key, v, err)
			}
			incr := func() (retries int, err error) {
				for i := 0; i < maxRetries; i++ {
					err = c.Watch(ctx, func(tx *redis.Tx) error {
						n, err := tx.Get(ctx, key).Int()
						if err != nil {
							return err
						}
						_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Set(ctx, key, n+1, 0)
							return nil
						})
						return err
					}, key)
					if err == nil {
						return i, nil
					}
					if !errors.Is(err, redis.TxFailedErr) {
						return i, err
					}
				}
				return maxRetries, fmt.Errorf("gave up after %d TxFailedErr retries", maxRetries)
			}
			var wg sync.WaitGroup
			var totalRetries atomic.Int64
			errs := make(chan error, workers)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for j := 0; j < perWorker; j++ {
						r, err := incr()
						totalRetries.Add(int64(r))
						if err != nil {
							errs <- fmt.Errorf("worker %d increment %d: %w", w, j, err)
							return
						}
					}
				}(w)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			want := workers * perWorker
			if v, err := c.Get(ctx, key).Int(); err != nil || v != want {
				t.Errorf("final counter through the proxy: %d, %v; want %d", v, err, want)
			}
			if v, err := e.direct(1).Get(ctx, key).Int(); err != nil || v != want {
				t.Errorf("final counter on Redis DB 1: %d, %v; want %d", v, err, want)
			}
			t.Logf("%d increments, %d TxFailedErr retries", want, totalRetries.Load())
		})
	}
}

// TestWatchConflict: a write by another client between WATCH and EXEC makes
// EXEC fail with redis.TxFailedErr (deterministic, unlike the race above).
func TestWatchConflict(t *testing.T) {
	for _, proto := range protocols {
		proto := proto
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			ctx := testCtx(t, 30*time.Second)
			c := e.client(withProto(proto))
			other := e.client(withProto(proto))
			const key = "i31"
			if err := c.Set(ctx, key, "a", 0).Err(); err != nil {
				t.Fatal(err)
			}
			err := c.Watch(ctx, func(tx *redis.Tx) error {
				if v, err := tx.Get(ctx, key).Result(); err != nil || v != "a" {
					return fmt.Errorf("GET under WATCH: %q, %v", v, err)
				}
				if err := other.Set(ctx, key, "b", 0).Err(); err != nil {
					return fmt.Errorf("SET by the other client: %w", err)
				}
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, key, "c", 0)
					return nil
				})
				return err
			}, key)
			if !errors.Is(err, redis.TxFailedErr) {
				t.Errorf("EXEC after a conflicting write: err %v, want redis.TxFailedErr", err)
			}
			if v, err := c.Get(ctx, key).Result(); err != nil || v != "b" {
				t.Errorf("GET after the failed transaction: %q, %v; want b", v, err)
			}
			// Under WATCH, a GET must see the other client's latest write.
			err = c.Watch(ctx, func(tx *redis.Tx) error {
				v, err := tx.Get(ctx, key).Result()
				if err != nil || v != "b" {
					return fmt.Errorf("GET under WATCH: %q, %v; want b", v, err)
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, key, "d", 0)
					return nil
				})
				return err
			}, key)
			if err != nil {
				t.Errorf("uncontended WATCH transaction: %v", err)
			}
			if v, err := other.Get(ctx, key).Result(); err != nil || v != "d" {
				t.Errorf("GET by the other client: %q, %v; want d", v, err)
			}
		})
	}
}

// receive waits for the next message on sub (with a deadline).
func receive(ctx context.Context, t *testing.T, sub *redis.PubSub) *redis.Message {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := sub.ReceiveMessage(rctx)
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	return m
}

// TestPubSub: SUBSCRIBE and PSUBSCRIBE through the proxy; PUBLISH from other
// clients (through the proxy and directly on Redis); messages arrive in order,
// RESP3 as push messages.
func TestPubSub(t *testing.T) {
	for _, proto := range protocols {
		proto := proto
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			e := newEnv(t, envOpts{})
			ctx := testCtx(t, 30*time.Second)
			c := e.client(withProto(proto))
			pub := e.client(withProto(proto))

			sub := c.Subscribe(ctx, "chan:a", "chan:b")
			defer sub.Close()
			for i := 0; i < 2; i++ { // one confirmation per channel
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				msg, err := sub.Receive(rctx)
				cancel()
				if err != nil {
					t.Fatalf("SUBSCRIBE confirmation: %v", err)
				}
				s, ok := msg.(*redis.Subscription)
				if !ok || s.Kind != "subscribe" || s.Count != i+1 {
					t.Fatalf("SUBSCRIBE confirmation %d: %#v", i, msg)
				}
			}
			if n, err := pub.Publish(ctx, "chan:a", "hello").Result(); err != nil || n != 1 {
				t.Errorf("PUBLISH chan:a through the proxy: %d receivers, %v; want 1", n, err)
			}
			if n, err := e.direct(0).Publish(ctx, "chan:b", "from-redis").Result(); err != nil || n != 1 {
				t.Errorf("PUBLISH chan:b on Redis: %d receivers, %v; want 1", n, err)
			}
			for i := 0; i < 10; i++ {
				if err := pub.Publish(ctx, "chan:a", fmt.Sprintf("m%d", i)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if m := receive(ctx, t, sub); m.Channel != "chan:a" || m.Payload != "hello" {
				t.Errorf("first message: %#v", m)
			}
			if m := receive(ctx, t, sub); m.Channel != "chan:b" || m.Payload != "from-redis" {
				t.Errorf("second message: %#v", m)
			}
			for i := 0; i < 10; i++ {
				if m := receive(ctx, t, sub); m.Channel != "chan:a" || m.Payload != fmt.Sprintf("m%d", i) {
					t.Errorf("message %d: %#v", i, m)
				}
			}
			// PING in subscribed mode.
			if err := sub.Ping(ctx, "hi"); err != nil {
				t.Errorf("PING while subscribed: %v", err)
			}
			// Unsubscribed from chan:b: its messages no longer arrive.
			if err := sub.Unsubscribe(ctx, "chan:b"); err != nil {
				t.Errorf("UNSUBSCRIBE: %v", err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				n, err := e.direct(0).PubSubNumSub(ctx, "chan:b").Result()
				if err != nil {
					t.Fatal(err)
				}
				if n["chan:b"] == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("chan:b still has %d subscribers after UNSUBSCRIBE", n["chan:b"])
				}
				time.Sleep(20 * time.Millisecond)
			}
			_ = pub.Publish(ctx, "chan:b", "lost").Err()
			_ = pub.Publish(ctx, "chan:a", "after-unsub").Err()
			if m := receive(ctx, t, sub); m.Channel != "chan:a" || m.Payload != "after-unsub" {
				t.Errorf("after UNSUBSCRIBE chan:b: %#v, want chan:a after-unsub", m)
			}

			// Pattern subscription on another client.
			psub := c.PSubscribe(ctx, "news.*")
			defer psub.Close()
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			msg, err := psub.Receive(rctx)
			cancel()
			if s, ok := msg.(*redis.Subscription); err != nil || !ok || s.Kind != "psubscribe" || s.Channel != "news.*" {
				t.Fatalf("PSUBSCRIBE confirmation: %#v, %v", msg, err)
			}
			_ = pub.Publish(ctx, "sport.x", "not-matching").Err()
			if n, err := pub.Publish(ctx, "news.tech", "p1").Result(); err != nil || n != 1 {
				t.Errorf("PUBLISH news.tech: %d receivers, %v; want 1", n, err)
			}
			if m := receive(ctx, t, psub); m.Pattern != "news.*" || m.Channel != "news.tech" || m.Payload != "p1" {
				t.Errorf("pattern message: %#v", m)
			}

			// Ordinary commands still work on the clients' other connections.
			if err := c.Set(ctx, "after:pubsub", "x", 0).Err(); err != nil {
				t.Errorf("SET after pub/sub: %v", err)
			}
			if v, err := c.Get(ctx, "after:pubsub").Result(); err != nil || v != "x" {
				t.Errorf("GET after pub/sub: %q, %v", v, err)
			}
		})
	}
}

// TestPassword: redis-server with --requirepass; go-redis authenticates with
// its Password option (inside HELLO 3 AUTH, or AUTH for RESP2 fallback). A
// wrong password and no password are refused, as Redis refuses them; an ACL
// user authenticates with Username+Password.
func TestPassword(t *testing.T) {
	const pw = "s3cret-interop"
	e := newEnv(t, envOpts{password: pw})
	ctx := testCtx(t, 30*time.Second)

	for _, proto := range protocols {
		proto := proto
		t.Run(fmt.Sprintf("good-resp%d", proto), func(t *testing.T) {
			c := e.client(withProto(proto))
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("PING with the right password: %v", err)
			}
			checkReplyTypes(ctx, t, c, proto)
			key := fmt.Sprintf("pw:%d", proto)
			if err := c.Set(ctx, key, "ok", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			if v, err := e.direct(1).Get(ctx, key).Result(); err != nil || v != "ok" {
				t.Errorf("Redis DB 1 %s: %q, %v", key, v, err)
			}
		})
	}

	t.Run("wrong-password", func(t *testing.T) {
		c := e.client(func(o *redis.Options) { o.Password = "wrong"; o.MaxRetries = -1 })
		err := c.Ping(ctx).Err()
		if err == nil {
			t.Fatal("PING with a wrong password succeeded")
		}
		if !strings.Contains(err.Error(), "WRONGPASS") && !strings.Contains(err.Error(), "invalid password") {
			t.Errorf("wrong password: %v; want WRONGPASS as Redis says", err)
		}
		if _, err := c.Get(ctx, "pw:3").Result(); err == nil {
			t.Error("GET with a wrong password succeeded")
		}
	})

	t.Run("no-password", func(t *testing.T) {
		c := e.client(func(o *redis.Options) { o.Password = ""; o.MaxRetries = -1 })
		if v, err := c.Get(ctx, "pw:3").Result(); err == nil {
			t.Fatalf("GET without a password succeeded: %q", v)
		} else if !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("GET without a password: %v; want NOAUTH as Redis says", err)
		}
	})

	t.Run("acl-user", func(t *testing.T) {
		if err := e.direct(0).Do(ctx, "ACL", "SETUSER", "app", "on", ">app-pw", "~*", "&*", "+@all").Err(); err != nil {
			t.Fatalf("ACL SETUSER: %v", err)
		}
		c := e.client(func(o *redis.Options) { o.Username = "app"; o.Password = "app-pw" })
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING as ACL user app: %v", err)
		}
		if who, err := c.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "app" {
			t.Errorf("ACL WHOAMI: %q, %v; want app", who, err)
		}
		checkReplyTypes(ctx, t, c, 3)
		bad := e.client(func(o *redis.Options) { o.Username = "app"; o.Password = "nope"; o.MaxRetries = -1 })
		if err := bad.Ping(ctx).Err(); err == nil {
			t.Error("PING as app with a wrong password succeeded")
		}
	})
}
