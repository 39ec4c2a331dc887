import socket, time, os, signal, sys
PX = int(open('/tmp/rvx/px3.pid').read()) if os.path.exists('/tmp/rvx/px3.pid') else None
def rss(pid):
    for l in open(f'/proc/{pid}/status'):
        if l.startswith('VmRSS'): return int(l.split()[1])//1024
pid = int(sys.argv[1]); rpid = int(open('/tmp/rvx/redis.pid').read())
mode = sys.argv[2]
s = socket.create_connection(('127.0.0.1', 27414))
def enc(*a):
    out = b'*%d\r\n' % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b'$%d\r\n%s\r\n' % (len(x), x)
    return out
if mode == 'multi':
    s.sendall(enc('WATCH', 'zz')); time.sleep(0.2); s.recv(100)  # pinned
    s.sendall(enc('MULTI')); time.sleep(0.2); s.recv(100)
print('rss before', rss(pid))
os.kill(rpid, signal.SIGSTOP)
try:
    val = b'x' * 1000
    chunk = b''.join(enc('SET', 'k%d' % i, val) for i in range(1000))
    s.setblocking(False)
    sent = 0; t0 = time.time()
    while time.time() - t0 < 8:
        try:
            n = s.send(chunk); sent += n
        except BlockingIOError:
            time.sleep(0.01)
    print('sent MB', sent >> 20, 'rss after', rss(pid))
finally:
    os.kill(rpid, signal.SIGCONT)
s.close()
