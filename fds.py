import redis
cs = [redis.Redis(port=27413, db=0) for _ in range(8)]
errs = 0; out = []
for i, c in enumerate(cs):
    try:
        c.ping()
    except Exception as e:
        out.append(("connect", i, str(e)[:60]))
for db in range(16):
    for proto in (2,):
        for i, c in enumerate(cs):
            try:
                c.execute_command("SELECT", db); c.set("k", "v"); c.get("k")
            except Exception as e:
                errs += 1; out.append((db, i, str(e)[:80]))
print(errs, out[:6])
