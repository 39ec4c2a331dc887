// jfsbench times file-system work done by JuiceFS 1.2.0's own metadata
// engine (pkg/meta, as a mount holds it) on two meta URLs, phase by phase,
// each phase on one target and then on the other (which one first
// alternating), so that both meet the machine in the same moments. It is the
// driver of bench/juicefs_engine.sh, which puts Redis behind a simulated
// network and sidecache in front of one of the two.
//
// Phases, each over -dirs directories of -files files, -threads at a time
// (a thread takes one directory):
//
//	create   mkdir, then per file create + one written slice + close,
//	         as a checkout or an untar does
//	stat     -rounds times: per file, lookup of the directory in /, lookup
//	         of the file: what the kernel asks for a stat() of dir/file
//	         (a build, `git status`) once its entry cache (1 s) expired
//	getattr  -rounds times: per file, getattr, what an fstat() or an open()
//	         asks once the kernel's attribute cache (1 s) expired
//	ls       readdir with attributes (ls -l) of each directory, -rounds times
//	rm       rm -r of each directory
//
// Lookups check permissions as a mount does for a user (uid 1000): JuiceFS
// then reads the parent's attributes too.
//
// -first 1 runs each phase on the second target first (then the first target
// first on the next phase, and so on): a script that runs jfsbench again
// alternates it, so that each target is first as often.
//
// Output: CSV on stdout, label,phase,ops,seconds (one line per target and
// phase); every result is checked (a lookup must find the inode its create
// made, a getattr the length its write gave, a listing every file), a wrong
// one exits 3.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/juicedata/juicefs/pkg/meta"
	"github.com/juicedata/juicefs/pkg/utils"
	"github.com/sirupsen/logrus"
)

var (
	dirs    = flag.Int("dirs", 8, "directories")
	files   = flag.Int("files", 200, "files per directory")
	threads = flag.Int("threads", 4, "directories worked on at once")
	rounds  = flag.Int("rounds", 3, "times stat and ls go over the tree")
	labels  = flag.String("labels", "direct,sidecache", "the two targets' labels")
	first   = flag.Int("first", 0, "the target that runs the first phase first (0 or 1)")
)

type target struct {
	label string
	m     meta.Meta
	dirs  []meta.Ino
	inos  [][]meta.Ino
}

var user = meta.NewContext(1, 1000, []uint32{1000})

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "jfsbench: "+format+"\n", args...)
	os.Exit(3)
}

func open(label, url string) *target {
	conf := meta.DefaultConf()
	conf.NoBGJob = true
	m := meta.NewClient(url, conf)
	m.OnMsg(meta.DeleteSlice, func(args ...interface{}) error { return nil })
	if err := m.Reset(); err != nil {
		fail("%s: reset: %v", label, err)
	}
	format := &meta.Format{Name: "bench", UUID: "5d1c5e2a-0b8e-4c4f-9a57-3c0e6f1b0001", Storage: "file",
		Bucket: os.TempDir() + "/jfsbench/", BlockSize: 4096, TrashDays: 0}
	if err := m.Init(format, false); err != nil {
		fail("%s: format: %v", label, err)
	}
	if _, err := m.Load(true); err != nil {
		fail("%s: load: %v", label, err)
	}
	if err := m.NewSession(true); err != nil {
		fail("%s: session: %v", label, err)
	}
	// / writable by the user, as a volume's mount point given to one
	mode := meta.Attr{Mode: 0777}
	if st := m.SetAttr(meta.Background, meta.RootInode, meta.SetAttrMode, 0, &mode); st != 0 {
		fail("%s: chmod /: %v", label, st)
	}
	return &target{label: label, m: m, dirs: make([]meta.Ino, *dirs), inos: make([][]meta.Ino, *dirs)}
}

func must(t *target, what string, st syscall.Errno) {
	if st != 0 {
		fail("%s: %s: %v", t.label, what, st)
	}
}

func dirName(d int) string { return fmt.Sprintf("dir%d", d) }

func fileName(f int) string { return fmt.Sprintf("file%d.go", f) }

func (t *target) create(d int) int {
	var attr meta.Attr
	must(t, "mkdir", t.m.Mkdir(user, meta.RootInode, dirName(d), 0755, 022, 0, &t.dirs[d], &attr))
	t.inos[d] = make([]meta.Ino, *files)
	for f := 0; f < *files; f++ {
		var ino meta.Ino
		must(t, "create", t.m.Create(user, t.dirs[d], fileName(f), 0644, 022, syscall.O_EXCL, &ino, &attr))
		var id uint64
		must(t, "new slice", t.m.NewSlice(user, &id))
		size := uint32(1000 + f)
		must(t, "write", t.m.Write(user, ino, 0, 0, meta.Slice{Id: id, Size: size, Len: size}, time.Now()))
		must(t, "close", t.m.Close(user, ino))
		t.inos[d][f] = ino
	}
	return 1 + 4**files
}

func (t *target) stat(d int) int {
	var ino meta.Ino
	var attr meta.Attr
	for r := 0; r < *rounds; r++ {
		for f := 0; f < *files; f++ {
			must(t, "lookup dir", t.m.Lookup(user, meta.RootInode, dirName(d), &ino, &attr, true))
			if ino != t.dirs[d] {
				fail("%s: lookup %s: inode %d, want %d", t.label, dirName(d), ino, t.dirs[d])
			}
			must(t, "lookup file", t.m.Lookup(user, t.dirs[d], fileName(f), &ino, &attr, true))
			if ino != t.inos[d][f] || attr.Length != uint64(1000+f) {
				fail("%s: lookup %s: inode %d length %d, want %d %d", t.label, fileName(f), ino, attr.Length,
					t.inos[d][f], 1000+f)
			}
		}
	}
	return *rounds * 2 * *files
}

func (t *target) getattr(d int) int {
	var attr meta.Attr
	for r := 0; r < *rounds; r++ {
		for f := 0; f < *files; f++ {
			must(t, "getattr", t.m.GetAttr(user, t.inos[d][f], &attr))
			if attr.Length != uint64(1000+f) {
				fail("%s: getattr %s: length %d, want %d", t.label, fileName(f), attr.Length, 1000+f)
			}
		}
	}
	return *rounds * *files
}

func (t *target) ls(d int) int {
	for r := 0; r < *rounds; r++ {
		var entries []*meta.Entry
		must(t, "readdir", t.m.Readdir(user, t.dirs[d], 1, &entries))
		if len(entries) != *files+2 { // with . and ..
			fail("%s: readdir %s: %d entries, want %d", t.label, dirName(d), len(entries), *files+2)
		}
	}
	return *rounds
}

func (t *target) rm(d int) int {
	var count uint64
	must(t, "rm -r", t.m.Remove(user, meta.RootInode, dirName(d), &count))
	if count != uint64(*files+1) {
		fail("%s: rm -r %s: %d removed, want %d", t.label, dirName(d), count, *files+1)
	}
	return 1 + *files
}

// run does one phase on t, -threads directories at a time: ops, seconds.
func (t *target) run(phase func(*target, int) int) (int, float64) {
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next, ops := 0, 0
	for w := 0; w < *threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				d := next
				next++
				mu.Unlock()
				if d >= *dirs {
					return
				}
				n := phase(t, d)
				mu.Lock()
				ops += n
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ops, time.Since(start).Seconds()
}

func main() {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: jfsbench [flags] META_URL_1 META_URL_2\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 || *dirs < 1 || *files < 1 || *threads < 1 || *rounds < 1 || *first < 0 || *first > 1 {
		flag.Usage()
		os.Exit(1)
	}
	utils.SetLogLevel(logrus.ErrorLevel) // JuiceFS's own log: errors only
	names := strings.Split(*labels, ",")
	if len(names) != 2 {
		fail("-labels: two names, comma-separated, not %q", *labels)
	}
	targets := [2]*target{open(names[0], flag.Arg(0)), open(names[1], flag.Arg(1))}
	phases := []struct {
		name string
		fn   func(*target, int) int
	}{{"create", (*target).create}, {"stat", (*target).stat}, {"getattr", (*target).getattr},
		{"ls", (*target).ls}, {"rm", (*target).rm}}
	fmt.Println("label,phase,ops,seconds")
	for i, p := range phases {
		order := []int{0, 1}
		if (i+*first)%2 == 1 {
			order = []int{1, 0}
		}
		var ops [2]int
		var secs [2]float64
		for _, k := range order {
			ops[k], secs[k] = targets[k].run(p.fn)
		}
		for k := 0; k < 2; k++ {
			fmt.Printf("%s,%s,%d,%.4f\n", targets[k].label, p.name, ops[k], secs[k])
		}
	}
	for _, t := range targets {
		_ = t.m.CloseSession()
	}
}
