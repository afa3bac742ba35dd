"""The framed channel between runner, lane and worker: data only, sizes checked, limits kept."""
import json
import socket
import struct
import threading
import time

import pytest

from harness.isolate.channel import Channel, ChannelClosed, ProtocolError


def pair():
    a, b = socket.socketpair()
    return Channel(a), Channel(b)


def test_message_and_payload_round_trip():
    a, b = pair()
    a.send({"event": "output", "shape": [2, 3]}, b"\x00\x01" * 1000)
    message, payload = b.recv(timeout=5)
    assert message == {"event": "output", "shape": [2, 3]} and bytes(payload) == b"\x00\x01" * 1000
    a.send({"op": "ack"})
    assert b.recv(timeout=5) == ({"op": "ack"}, bytearray())


def test_nothing_within_the_timeout_is_none_and_a_closed_end_raises():
    a, b = pair()
    assert b.recv(timeout=0.05) is None
    a.close()
    with pytest.raises(ChannelClosed):
        b.recv(timeout=1)


def test_frames_that_are_too_large_or_not_json_objects_are_refused():
    a, b = pair()
    a.send({"x": 1}, b"y" * 100)
    with pytest.raises(ProtocolError, match="too large"):
        b.recv(timeout=5, max_payload=10)
    a, b = pair()
    header = b"[1, 2]"
    a.sock.sendall(struct.pack("!IQ", len(header), 0) + header)
    with pytest.raises(ProtocolError, match="not an object"):
        b.recv(timeout=5)
    a, b = pair()
    a.sock.sendall(struct.pack("!IQ", 3, 0) + b"{x]")
    with pytest.raises(ProtocolError, match="not JSON"):
        b.recv(timeout=5)


def test_a_frame_left_incomplete_fails_at_the_time_limit():
    a, b = pair()
    header = json.dumps({"event": "output"}).encode()
    a.sock.sendall(struct.pack("!IQ", len(header), 1000) + header + b"partial")
    with pytest.raises(ProtocolError, match="incomplete"):
        b.recv(timeout=0.3)


def test_a_frame_that_begins_at_the_end_of_a_short_poll_has_its_own_time_to_complete():
    """The lane polls its worker every 0.5 s: a frame beginning late in a poll must not be cut
    off at the poll's end (that once turned a loaded machine's slow worker into 'crashed')."""
    a, b = pair()
    header = json.dumps({"event": "output"}).encode()
    frame = struct.pack("!IQ", len(header), 4) + header + b"data"

    def send_slowly():
        time.sleep(0.2)
        a.sock.sendall(frame[:5])
        time.sleep(0.4)
        a.sock.sendall(frame[5:])

    sender = threading.Thread(target=send_slowly)
    sender.start()
    assert b.recv(timeout=0.3, frame_s=5) == ({"event": "output"}, bytearray(b"data"))
    sender.join()


def test_bytes_already_waiting_are_read_even_with_no_time_left():
    a, b = pair()
    a.send({"op": "ack"}, b"x" * 10_000)
    assert b.recv(timeout=5, frame_s=0) == ({"op": "ack"}, bytearray(b"x" * 10_000))


def test_a_channel_closed_on_this_side_raises_channel_closed_not_a_select_error():
    """A stop closes a lane's channel while a runner thread may be waiting on it (select on fd -1
    raised ValueError in that thread): the wait ends as ChannelClosed, which the runner handles."""
    mine, theirs = Channel.pair()
    mine.close()
    with pytest.raises(ChannelClosed, match="the channel was closed"):
        mine.recv(timeout=0.1)
    theirs.close()
