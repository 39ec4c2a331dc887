"""
tests/stress/juicefs_scripts.py — JuiceFS's lookup scripts, byte for byte
as JuiceFS loads them (their SHA1 is how sidecache knows them), for the
tests that send them: the stress tools here and the integration tests.
"""
# JuiceFS 1.0 to 1.4
LOOKUP_V1 = ("\nlocal buf = redis.call('HGET', KEYS[1], KEYS[2])\nif not buf then\n"
             "    error(\"ENOENT\")\nend\nlocal ino = struct.unpack(\">I8\", string.sub(buf, 2))\n"
             "-- double float has 52 significant bits\nif ino > 4503599627370495 then\n"
             "    error(\"ENOTSUP\")\nend\n"
             "return {ino, redis.call('GET', \"i\" .. string.format(\"%.f\", ino))}\n")
SHA_V1 = "8526c64984678fc27f67f44755c8ba7dcdf7ea60"
# JuiceFS 0.x
LOOKUP_V0 = ("\nlocal buf = redis.call('HGET', KEYS[1], KEYS[2])\nif not buf then\n"
             "       return false\nend\nlocal ino = struct.unpack(\">I8\", string.sub(buf, 2))\n"
             "return {ino, redis.call('GET', \"i\" .. tostring(ino))}\n")
SHA_V0 = "72af033cd6d0773efd6a53eaf9490b4a138f55af"
