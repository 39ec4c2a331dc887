package main

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// preciseTimer sleeps with nanosecond resolution: a timerfd(2) read through Go's
// netpoller, so that the goroutine is woken as soon as the kernel's hrtimer fires.
// Go's own timers are no use below a millisecond: the netpoller waits for them
// in whole milliseconds. One per goroutine; not safe for concurrent use.
type preciseTimer struct {
	fd int
	f  *os.File
}

func newPreciseTimer() (*preciseTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &preciseTimer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}, nil
}

// sleep returns after d (at once when d <= 0).
func (t *preciseTimer) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		return err
	}
	var buf [8]byte
	_, err := t.f.Read(buf[:])
	return err
}

func (t *preciseTimer) close() { _ = t.f.Close() }
