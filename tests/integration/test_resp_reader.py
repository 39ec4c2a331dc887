"""Self-test of the RESP reader in helpers.py that the other tests rely on
(no servers needed): every RESP2/RESP3 type, and every prefix of a frame is
reported incomplete rather than misparsed."""
import pytest

from helpers import (BigNum, BigNumText, Double, Err, Incomplete, Push, RMap, RSet, Simple,
                     Verbatim, encode, parse_frame)

FRAMES = [
    (b"+OK\r\n", Simple(b"OK")),
    (b"-ERR bad thing\r\n", Err(b"ERR bad thing")),
    (b":-42\r\n", -42),
    (b"$5\r\na\r\nb\x00\r\n", b"a\r\nb\x00"),
    (b"$0\r\n\r\n", b""),
    (b"$-1\r\n", None),
    (b"*-1\r\n", None),
    (b"_\r\n", None),
    (b"*3\r\n:1\r\n$1\r\nx\r\n*1\r\n+y\r\n", [1, b"x", [b"y"]]),
    (b"%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n_\r\n", RMap([(b"a", 1), (b"b", None)])),
    (b"~2\r\n$1\r\na\r\n$1\r\nb\r\n", RSet([b"a", b"b"])),
    (b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", Push([b"message", b"c", b"m"])),
    (b",1.5\r\n", Double(1.5)),
    (b",inf\r\n", Double(float("inf"))),
    (b"#t\r\n", True),
    (b"#f\r\n", False),
    (b"(12345678901234567890\r\n", BigNum(12345678901234567890)),
    (b"=8\r\ntxt:abcd\r\n", Verbatim(b"txt:abcd")),
    (b"!5\r\nERR x\r\n", Err(b"ERR x")),
    (b"|1\r\n$3\r\nttl\r\n:5\r\n$1\r\nv\r\n", b"v"),
    # a script's big_number string, passed through by Redis
    (b"(abc\r\n", BigNumText(b"abc")),
    (b"(\r\n", BigNumText(b"")),
    # a push inside an aggregate is one of its elements (SUBSCRIBE in MULTI)
    (b"*1\r\n>3\r\n$9\r\nsubscribe\r\n$3\r\nchx\r\n:1\r\n",
     [Push([b"subscribe", b"chx", 1])]),
    (b">2\r\n+a\r\n>1\r\n+x\r\n", Push([Simple(b"a"), Push([Simple(b"x")])])),
]


@pytest.mark.parametrize("raw,want", FRAMES, ids=[repr(f[0][:12]) for f in FRAMES])
def test_resp_reader_parses_every_type_and_detects_incomplete(raw, want):
    value, end = parse_frame(raw + b"+NEXT\r\n")
    assert end == len(raw)
    assert value == want and type(value) is type(want)
    for cut in range(len(raw)):
        with pytest.raises(Incomplete):
            parse_frame(raw[:cut])


def test_encode_is_a_multibulk():
    assert encode("SET", b"k\r\n", 5) == b"*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$1\r\n5\r\n"
