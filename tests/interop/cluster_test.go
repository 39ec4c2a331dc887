package interop

// Redis Cluster. JuiceFS keeps a volume on a cluster under the hash tag {N}
// (N: the db number in its URL), so all of it lives in one slot, on one
// master, and it talks to the cluster with a go-redis ClusterClient, which
// reads the topology (CLUSTER SLOTS) and then goes to the nodes itself.
// sidecache, in front of the master of that slot with key-prefix {N}, names
// itself as the master of every range: the volume's commands come through
// it and its reads hit the cache; a command for another range comes to it
// too, and Redis's MOVED sends the client on to that range's node.
//
// The cluster here: two masters, A with slots 0-8191 and B with 8192-16383;
// {1} is slot 9842, on B.

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotsArgs is CLUSTER <sub> first, ..., last: every slot of the range.
func slotsArgs(sub string, first, last int) []interface{} {
	args := []interface{}{"CLUSTER", sub}
	for s := first; s <= last; s++ {
		args = append(args, s)
	}
	return args
}

// startCluster starts two cluster nodes, gives each half of the slots and
// has them meet; it returns their ports once both see the whole cluster.
func startCluster(t *testing.T, ctx context.Context) (int, int) {
	t.Helper()
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000"}
	a, b := startRedis(t, "", args...), startRedis(t, "", args...)
	ca, cb := nodeClient(t, a), nodeClient(t, b)
	// (ADDSLOTS: Redis 6 has no ADDSLOTSRANGE)
	must(t, ca.Do(ctx, slotsArgs("ADDSLOTS", 0, 8191)...).Err())
	must(t, cb.Do(ctx, slotsArgs("ADDSLOTS", 8192, 16383)...).Err())
	must(t, ca.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", b).Err())
	deadline := time.Now().Add(20 * time.Second)
	for {
		ready := true
		for _, c := range []*redis.Client{ca, cb} {
			info, err := c.ClusterInfo(ctx).Result()
			slots, err2 := c.ClusterSlots(ctx).Result()
			if err != nil || err2 != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_known_nodes:2") || len(slots) != 2 {
				ready = false
			}
		}
		if ready {
			return a, b
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two nodes did not form a cluster")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// masterAddrs is the address of every master the cluster client knows.
func masterAddrs(t *testing.T, ctx context.Context, cc *redis.ClusterClient) []string {
	t.Helper()
	var (
		mu      sync.Mutex // ForEachMaster calls fn from a goroutine per master
		masters []string
	)
	must(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, c.Options().Addr)
		return nil
	}))
	sort.Strings(masters)
	return masters
}

func nodeClient(t *testing.T, port int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitTrackingActive waits until sidecache behind c reports tracking active
// (its listener opens before the invalidation connection is set up).
func waitTrackingActive(t *testing.T, ctx context.Context, c *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.Info(ctx, "sidecache").Val(), "tracking_state:active") {
		if time.Now().After(deadline) {
			t.Fatal("tracking not active")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cacheHits reads cache_hits from the proxy's INFO.
func cacheHits(t *testing.T, ctx context.Context, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(ctx, "sidecache").Result()
	must(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cache_hits:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no cache_hits in INFO: %q", info)
	return 0
}

func TestClusterClientSendsTheVolumeSlotThroughSidecache(t *testing.T) {
	if targetDirect() {
		t.Skip("the topology through sidecache names sidecache")
	}
	ctx := testCtx(t, 60*time.Second)
	a, b := startCluster(t, ctx)
	pport := startProxy(t, proxyBin(t), b, "", "--key-prefix", "{1}")
	paddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))
	proxy, nodeA, nodeB := nodeClient(t, pport), nodeClient(t, a), nodeClient(t, b)

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{paddr}})
	t.Cleanup(func() { _ = cc.Close() })
	must(t, cc.Ping(ctx).Err())

	// the masters it knows: sidecache alone
	masters := masterAddrs(t, ctx, cc)
	want := []string{paddr}
	if fmt.Sprint(masters) != fmt.Sprint(want) {
		t.Fatalf("masters %v, want %v (sidecache); CLUSTER SLOTS: through sidecache %v, of A %v, of B %v",
			masters, want, proxy.ClusterSlots(ctx).Val(), nodeA.ClusterSlots(ctx).Val(), nodeB.ClusterSlots(ctx).Val())
	}

	// the volume's inode attribute: written, then read twice; the second
	// read is a hit (once tracking is on: the listener opens before)
	waitTrackingActive(t, ctx, proxy)
	must(t, cc.Set(ctx, "{1}i2", "attr-v1", 0).Err())
	hits := cacheHits(t, ctx, proxy)
	for i := 0; i < 2; i++ {
		if v, err := cc.Get(ctx, "{1}i2").Result(); err != nil || v != "attr-v1" {
			t.Fatalf("GET {1}i2 = %q, %v", v, err)
		}
	}
	if got := cacheHits(t, ctx, proxy); got <= hits {
		t.Fatalf("cache_hits %d -> %d: the volume's reads did not reach the cache", hits, got)
	}

	// a write on node B itself, by another client: the cluster client
	// reads the new value, not the cached one
	must(t, nodeB.Set(ctx, "{1}i2", "attr-v2", 0).Err())
	deadline := time.Now().Add(2 * time.Second)
	for {
		v, err := cc.Get(ctx, "{1}i2").Result()
		must(t, err)
		if v == "attr-v2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET {1}i2 through sidecache still %q after a write on the node", v)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// a JuiceFS-style transaction on the volume's keys (WATCH, MULTI/EXEC)
	err := cc.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Get(ctx, "{1}nextinode").Int()
		if err != nil && err != redis.Nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "{1}nextinode", n+100, 0)
			p.Set(ctx, "{1}i3", "attr-3", 0)
			return nil
		})
		return err
	}, "{1}nextinode")
	must(t, err)
	if v, err := nodeB.Get(ctx, "{1}i3").Result(); err != nil || v != "attr-3" {
		t.Fatalf("node B: {1}i3 = %q, %v", v, err)
	}

	// a key of A's range reaches A: sidecache relays the MOVED of B
	must(t, cc.Set(ctx, "bar", "on-a", 0).Err())
	if v, err := nodeA.Get(ctx, "bar").Result(); err != nil || v != "on-a" {
		t.Fatalf("node A: bar = %q, %v", v, err)
	}
}

// A cluster client reloads the topology every ClusterStateReloadInterval
// (10 s by default), asking a node picked at random among those of the last
// topology; from a minute after its start (when go-redis first collects its
// nodes) that pick is no longer its seed, sidecache. Any other node it
// learned names the volume's real master, and the volume's commands would
// bypass the cache from then on. So the topology through sidecache names
// sidecache alone: every range, no replica. The client's reload interval is
// 20 ms here, and the test runs past that first minute.
func TestClusterClientStaysOnSidecacheAcrossReloads(t *testing.T) {
	if targetDirect() {
		t.Skip("the topology through sidecache names sidecache")
	}
	ctx := testCtx(t, 3*time.Minute)
	_, b := startCluster(t, ctx)
	pport := startProxy(t, proxyBin(t), b, "", "--key-prefix", "{1}")
	paddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))
	proxy := nodeClient(t, pport)

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{paddr},
		ClusterStateReloadInterval: 20 * time.Millisecond})
	t.Cleanup(func() { _ = cc.Close() })
	must(t, cc.Set(ctx, "{1}i2", "attr", 0).Err())

	get := func() {
		if v, err := cc.Get(ctx, "{1}i2").Result(); err != nil || v != "attr" {
			t.Fatalf("GET {1}i2 = %q, %v", v, err)
		}
	}
	// past go-redis's first collection of nodes (a minute after the first
	// topology), reloading all along
	for end := time.Now().Add(62 * time.Second); time.Now().Before(end); {
		get()
		time.Sleep(20 * time.Millisecond)
	}
	// now every read of the cached attribute is a hit: none went elsewhere
	const reads = 150
	hits := cacheHits(t, ctx, proxy)
	for i := 0; i < reads; i++ {
		get()
		time.Sleep(20 * time.Millisecond)
	}
	if got := cacheHits(t, ctx, proxy) - hits; got != reads {
		t.Fatalf("%d of %d reads of the volume's cached key hit sidecache's cache: the others went "+
			"around it (CLUSTER SLOTS through sidecache: %v)", got, reads, proxy.ClusterSlots(ctx).Val())
	}
	masters := masterAddrs(t, ctx, cc)
	if fmt.Sprint(masters) != fmt.Sprint([]string{paddr}) {
		t.Fatalf("the cluster client's masters are %v, want sidecache alone (%s)", masters, paddr)
	}
}

// A failover in the cluster while the client works: R, a replica of B,
// takes over B's slots. sidecache, in front of B, follows the volume's slot
// to R on B's MOVED, which the client gets as a TRYAGAIN and retries through
// sidecache; its reads hit the cache again, now filled from R. No command
// fails, every read sees the last write, and the client never learns a node
// other than sidecache.
func TestClusterFailoverKeepsTheVolumeOnSidecache(t *testing.T) {
	if targetDirect() {
		t.Skip("the topology through sidecache names sidecache")
	}
	ctx := testCtx(t, 2*time.Minute)
	a, b := startCluster(t, ctx)
	r := startRedis(t, "", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000")
	nodeB, nodeR := nodeClient(t, b), nodeClient(t, r)
	idB, err := nodeB.ClusterMyID(ctx).Result()
	must(t, err)
	must(t, nodeR.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(a)).Err())
	waitFor(t, "R learns B", func() bool { return strings.Contains(nodeR.ClusterNodes(ctx).Val(), idB) })
	must(t, nodeR.Do(ctx, "CLUSTER", "REPLICATE", idB).Err())
	waitFor(t, "R syncs with B", func() bool {
		return strings.Contains(nodeR.Info(ctx, "replication").Val(), "master_link_status:up")
	})
	waitVotesForR(t, ctx, []*redis.Client{nodeClient(t, a), nodeB, nodeR}, idB)

	pport := startProxy(t, proxyBin(t), b, "", "--key-prefix", "{1}")
	paddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))
	proxy := nodeClient(t, pport)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{paddr},
		ClusterStateReloadInterval: 50 * time.Millisecond})
	t.Cleanup(func() { _ = cc.Close() })

	// the client writes and reads its keys all along; the failover comes
	// in the middle
	var version int
	step := func() {
		version++
		key := fmt.Sprintf("{1}i%d", version%10)
		want := fmt.Sprintf("attr-%d", version)
		must(t, cc.Set(ctx, key, want, 0).Err())
		for i := 0; i < 3; i++ {
			if v, err := cc.Get(ctx, key).Result(); err != nil || v != want {
				t.Fatalf("GET %s = %q, %v; want %q", key, v, err, want)
			}
		}
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		step()
	}
	manualFailover(t, ctx, nodeR, nodeB)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		step()
	}

	// the volume's reads are hits again, through sidecache, now on R
	const reads = 100
	must(t, cc.Set(ctx, "{1}i2", "after", 0).Err())
	hits := cacheHits(t, ctx, proxy)
	for i := 0; i < reads; i++ {
		if v, err := cc.Get(ctx, "{1}i2").Result(); err != nil || v != "after" {
			t.Fatalf("GET {1}i2 = %q, %v", v, err)
		}
	}
	if got := cacheHits(t, ctx, proxy) - hits; got < reads-1 {
		t.Fatalf("%d of %d reads hit sidecache's cache after the failover (the client's masters: %v; CLUSTER "+
			"SLOTS through sidecache: %v)", got, reads, masterAddrs(t, ctx, cc), proxy.ClusterSlots(ctx).Val())
	}
	// and it never learned another node to read the topology from (a
	// relayed MOVED would have taught it R's address: go-redis keeps it)
	if masters := masterAddrs(t, ctx, cc); fmt.Sprint(masters) != fmt.Sprint([]string{paddr}) {
		t.Fatalf("the cluster client's masters are %v, want sidecache alone (%s)", masters, paddr)
	}
	if v, err := nodeR.Get(ctx, "{1}i2").Result(); err != nil || v != "after" {
		t.Fatalf("R: {1}i2 = %q, %v", v, err)
	}
}

// waitVotesForR waits until R (the last of nodes, a replica of B) could
// win an election: the masters only vote for a replica whose epoch is the
// cluster's, that has its link to B, and that they know as B's replica
// (Redis 6.2 often started a manual failover too early for one of these and
// the election failed).
func waitVotesForR(t *testing.T, ctx context.Context, nodes []*redis.Client, idB string) {
	t.Helper()
	nodeR := nodes[len(nodes)-1]
	idR, err := nodeR.ClusterMyID(ctx).Result()
	must(t, err)
	waitFor(t, "R learns the cluster's epoch", func() bool { return epochsSettled(ctx, nodes) })
	waitFor(t, "R has its link to B", func() bool {
		f := clusterNodes(ctx, nodeR)[idB]
		return len(f) > 7 && f[7] == "connected" && !strings.Contains(f[2], "fail")
	})
	waitFor(t, "the masters know R as B's replica", func() bool {
		for _, n := range nodes[:len(nodes)-1] {
			if f := clusterNodes(ctx, n)[idR]; len(f) < 4 || f[3] != idB {
				return false
			}
		}
		return true
	})
}

// clusterNodes is CLUSTER NODES as node id -> the fields of its line (id,
// address, flags, master, ping, pong, config epoch, link, slots...).
func clusterNodes(ctx context.Context, c *redis.Client) map[string][]string {
	nodes := map[string][]string{}
	for _, line := range strings.Split(c.ClusterNodes(ctx).Val(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			nodes[f[0]] = f
		}
	}
	return nodes
}

// epochsSettled: the masters with slots have distinct config epochs (two
// masters that start at 0 move one up some time after they meet) as the
// first node sees them, and every node has the same current epoch.
func epochsSettled(ctx context.Context, nodes []*redis.Client) bool {
	config := map[string]bool{}
	masters := 0
	for _, f := range clusterNodes(ctx, nodes[0]) {
		if strings.Contains(f[2], "master") && len(f) > 8 {
			masters++
			config[f[6]] = true
		}
	}
	current := map[string]bool{}
	for _, n := range nodes {
		info := n.ClusterInfo(ctx).Val()
		_, rest, _ := strings.Cut(info, "cluster_current_epoch:")
		epoch, _, _ := strings.Cut(rest, "\r\n")
		current[epoch] = true
	}
	return masters > 0 && len(config) == masters && len(current) == 1
}

// manualFailover asks R for CLUSTER FAILOVER until R is the master and B its
// replica: an election that gets no majority ends the manual failover after
// 5 s (waitVotesForR waits for what the votes need; this is the last
// resort), so it is asked again, up to 3 times.
func manualFailover(t *testing.T, ctx context.Context, nodeR, nodeB *redis.Client) {
	t.Helper()
	tookOver := func() bool {
		return strings.Contains(nodeR.Info(ctx, "replication").Val(), "role:master") &&
			strings.Contains(nodeB.Info(ctx, "replication").Val(), "role:slave")
	}
	for attempt := 0; attempt < 3; attempt++ {
		if !strings.Contains(nodeR.Info(ctx, "replication").Val(), "role:master") {
			must(t, nodeR.Do(ctx, "CLUSTER", "FAILOVER").Err())
		}
		for deadline := time.Now().Add(7 * time.Second); time.Now().Before(deadline); {
			if tookOver() {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Fatalf("R did not take over B's slots")
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
