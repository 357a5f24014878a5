"""The pure-Python trainer helper (python/c4) against the real node plugin and c4-notify.

    c4_python_test.py NODE_PLUGIN C4_NOTIFY PACKAGE_DIR [unittest args]

The node plugin runs as its own process on a temporary socket, with a stand-in Kubernetes API
(one pod: the trainer's) and a stand-in operator that decodes the NodeReports it is sent; the
helper's notices must come out of it with their fields. Standard library only.
"""

from __future__ import annotations

import http.server
import json
import os
import queue
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from typing import Any, Dict, List, Optional

NODE_PLUGIN, C4_NOTIFY, PACKAGE = sys.argv[1:4]
sys.argv[1:4] = []
sys.path.insert(0, PACKAGE)

import c4  # noqa: E402
from c4 import _wire  # noqa: E402

IDENTITY = {
    "C4_RANK": "3", "WORLD_SIZE": "8", "C4_JOB": "train", "C4_NAMESPACE": "ml",
    "C4_POD_NAME": "train-3", "C4_NODE_NAME": "node-7", "C4_RESTART_ATTEMPT": "2",
}
POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {
        "namespace": "ml", "name": "train-3", "uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        "resourceVersion": "5",
        "labels": {"c4.dev/job-name": "train", "c4.dev/replica-index": "3",
                   "c4.dev/restart-attempt": "2"},
    },
    "spec": {"nodeName": "node-7", "containers": [{"name": "trainer"}]},
    "status": {"phase": "Running"},
}


# ---- An independent CBOR decoder (the test's own, not the helper's) -------------------------

def cbor_decode(data: bytes) -> Any:
    value, end = _item(data, 0)
    if end != len(data):
        raise ValueError(f"{len(data) - end} trailing bytes")
    return value


def _item(b: bytes, i: int) -> Any:
    major, info = b[i] >> 5, b[i] & 0x1F
    i += 1
    if major == 7:
        simple = {20: False, 21: True, 22: None}
        if info in simple:
            return simple[info], i
        fmt = {25: ">e", 26: ">f", 27: ">d"}[info]
        n = struct.calcsize(fmt)
        return struct.unpack(fmt, b[i:i + n])[0], i + n
    if info < 24:
        arg = info
    else:
        n = {24: 1, 25: 2, 26: 4, 27: 8}[info]
        arg = int.from_bytes(b[i:i + n], "big")
        i += n
    if major == 0:
        return arg, i
    if major == 1:
        return -1 - arg, i
    if major in (2, 3):
        raw = b[i:i + arg]
        return (raw if major == 2 else raw.decode("utf-8")), i + arg
    if major == 4:
        out = []
        for _ in range(arg):
            v, i = _item(b, i)
            out.append(v)
        return out, i
    if major == 5:
        obj = {}
        for _ in range(arg):
            k, i = _item(b, i)
            obj[k], i = _item(b, i)
        return obj, i
    raise ValueError(f"unexpected CBOR major type {major}")


# ---- Stand-ins for the API server and the operator -------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    harness: "Harness"

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the API server's pods, list and watch
        if "watch=true" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            self.harness.stop.wait(30)
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            return
        pods = {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "5"},
                "items": [POD]}
        self._reply(json.dumps(pods).encode())

    def do_POST(self) -> None:  # noqa: N802 - the operator's report endpoint
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        batch = cbor_decode(body)
        with self.harness.lock:
            # The trainer's notices; the node plugin's own (processExited) are not the helper's.
            self.harness.notices.extend(n for n in batch.get("notices", [])
                                        if n.get("kind") in ("ProgressNotice",
                                                             "CheckpointNotice"))
        self._reply(json.dumps({"accepted": 1}).encode())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Harness:
    """c4-node-plugin on a temporary socket, fed by stand-in API and operator servers."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="c4-python-test-")
        self.socket = os.path.join(self.dir.name, "agent.sock")
        self.lock = threading.Lock()
        self.notices: List[Dict[str, Any]] = []
        self.stop = threading.Event()
        handler = type("Handler", (_Handler,), {"harness": self})
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{self.http.server_address[1]}"
        token = os.path.join(self.dir.name, "token")
        with open(token, "w") as f:
            f.write("tok")
        kubeconfig = os.path.join(self.dir.name, "kubeconfig")
        with open(kubeconfig, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "t",
                       "clusters": [{"name": "t", "cluster": {"server": url}}],
                       "users": [{"name": "t", "user": {"token": "tok"}}],
                       "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]},
                      f)
        self.metrics = f"127.0.0.1:{_free_port()}"
        self.log = open(os.path.join(self.dir.name, "node-plugin.log"), "w+")
        self.proc = subprocess.Popen(
            [NODE_PLUGIN, "--node-name=node-7", f"--kubeconfig={kubeconfig}",
             f"--socket={self.socket}", f"--operator-url={url}/v1/reports",
             "--allow-insecure-operator-url=true", f"--token-file={token}",
             "--attribution=auto", "--plugin-source=", "--profiler-plugin-source=",
             "--nvml-library=", f"--metrics-bind-address={self.metrics}", "--interval=0.1",
             f"--sysfs-root={self.dir.name}", f"--plugin-install-dir={self.dir.name}/lib"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the node plugin did not become ready:\n" + self.output())
            time.sleep(0.05)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.metrics}/readyz", timeout=1) as r:
                return r.status == 200 and os.path.exists(self.socket)
        except OSError:
            return False

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()[-4000:]

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=2) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def wait_notices(self, n: int, timeout: float = 5.0) -> List[Dict[str, Any]]:
        """The first n notices shipped since the last take (fails the test after timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.notices) >= n:
                    taken, self.notices = self.notices[:n], self.notices[n:]
                    return taken
            time.sleep(0.02)
        with self.lock:
            raise AssertionError(f"{len(self.notices)} of {n} notices shipped; node plugin log:\n"
                                 + self.output())

    def close(self) -> None:
        self.stop.set()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.http.shutdown()
        self.http.server_close()
        self.log.close()
        self.dir.cleanup()


def set_env(env: Dict[str, Optional[str]]) -> Dict[str, Optional[str]]:
    """Sets (or, for None, unsets) variables; returns what they were."""
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return old


class EnvCase(unittest.TestCase):
    env: Dict[str, Optional[str]] = {}

    def setUp(self) -> None:
        base = {k: None for k in ("RANK", "C4_RESUME_STEP", "C4_AGENT_SOCKET")}
        self.old = set_env({**base, **IDENTITY, **self.env})
        self.addCleanup(set_env, self.old)


class NodePluginTest(EnvCase):
    """The helper's notices, read, attributed and shipped by the real node plugin."""

    harness: Harness

    @classmethod
    def setUpClass(cls) -> None:
        cls.harness = Harness()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.harness.close()

    def setUp(self) -> None:
        super().setUp()
        set_env({"C4_AGENT_SOCKET": self.harness.socket})

    def assertIdentity(self, notice: Dict[str, Any], pid: int) -> None:
        self.assertEqual(notice["v"], 1)
        self.assertEqual(notice["id"], {
            "namespace": "ml", "job": "train", "pod": "train-3", "node": "node-7", "rank": 3,
            "worldSize": 8, "restartAttempt": 2, "pid": pid})
        self.assertGreater(notice["timeUnixNs"], time.time_ns() - 60 * 10**9)

    def test_notices_are_accepted_with_their_fields(self) -> None:
        accepted = self.harness.metric("c4_node_plugin_messages_accepted_total")
        self.assertTrue(c4.progress(40))
        self.assertTrue(c4.checkpoint_saved(40, "/ckpt/step-40/rank-3.pt"))
        self.assertTrue(c4.pause(90, "evaluating"))
        self.assertTrue(c4.resume())
        self.assertTrue(c4.finished(41))
        got = self.harness.wait_notices(5)
        for n in got:
            self.assertIdentity(n, os.getpid())
        self.assertEqual([(n["kind"], n["step"], n.get("state"), n.get("expectedSeconds"),
                           n.get("path")) for n in got],
                         [("ProgressNotice", 40, "training", None, None),
                          ("CheckpointNotice", 40, None, None, "/ckpt/step-40/rank-3.pt"),
                          ("ProgressNotice", 40, "evaluating", 90, None),
                          ("ProgressNotice", 40, "training", None, None),
                          ("ProgressNotice", 41, "finished", None, None)])
        self.assertEqual(self.harness.metric("c4_node_plugin_messages_accepted_total"),
                         accepted + 5)

    def test_phase_resumes_training_when_its_body_raises(self) -> None:
        c4.progress(70)
        with self.assertRaises(KeyError):
            with c4.phase("checkpointing", expect_seconds=120):
                raise KeyError("disk full")
        got = self.harness.wait_notices(3)
        self.assertEqual([(n["step"], n["state"], n.get("expectedSeconds")) for n in got],
                         [(70, "training", None), (70, "checkpointing", 120),
                          (70, "training", None)])

    def test_a_sender_that_exits_at_once_is_still_attributed(self) -> None:
        # The node plugin attributes by the sender's live pid (/proc/<pid>/cgroup): a child that
        # exits right after its notice must have waited until the notice was read.
        child = subprocess.run(
            [sys.executable, "-c", "import c4, os, sys; ok = c4.finished(9); "
             "print(os.getpid()); sys.exit(0 if ok else 1)"],
            env={**os.environ, "PYTHONPATH": PACKAGE}, capture_output=True, text=True,
            timeout=30)
        self.assertEqual(child.returncode, 0, child.stderr)
        (n,) = self.harness.wait_notices(1)
        self.assertIdentity(n, int(child.stdout))
        self.assertEqual((n["kind"], n["step"], n["state"]), ("ProgressNotice", 9, "finished"))


class DatagramCase(EnvCase):
    """A plain datagram socket of the test's own in place of the node plugin."""

    def setUp(self) -> None:
        super().setUp()
        self.dir = tempfile.TemporaryDirectory(prefix="c4-python-test-")
        self.addCleanup(self.dir.cleanup)
        self.path = os.path.join(self.dir.name, "s")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(self.server.close)
        self.server.bind(self.path)
        self.server.settimeout(2)
        set_env({"C4_AGENT_SOCKET": self.path})

    def receive(self) -> bytes:
        return self.server.recv(_wire.MAX_DATAGRAM_BYTES)

    def assertNothingSent(self) -> None:
        self.server.settimeout(0.2)
        with self.assertRaises(socket.timeout):
            self.server.recv(_wire.MAX_DATAGRAM_BYTES)


class SameAsC4NotifyTest(DatagramCase):
    """The helper's datagram is byte for byte c4-notify's (its time and pid aside)."""

    def notify(self, *args: str) -> bytes:
        r = subprocess.run([C4_NOTIFY, *args], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return self.receive()

    def check(self, cpp: bytes, send: Any) -> None:
        self.assertTrue(send())
        py = self.receive()
        ours, theirs = cbor_decode(py), cbor_decode(cpp)
        self.assertEqual(ours["id"]["pid"], os.getpid())
        for doc in (ours, theirs):
            doc["timeUnixNs"], doc["id"]["pid"] = 0, 0
        self.assertEqual(ours, theirs)
        # The same bytes once the time and pid are c4-notify's.
        d = cbor_decode(cpp)
        ident = _wire.Identity(d["id"]["namespace"], d["id"]["job"], d["id"]["pod"],
                               d["id"]["node"], d["id"]["rank"], d["id"]["worldSize"],
                               d["id"]["restartAttempt"], d["id"]["pid"])
        if d["kind"] == "CheckpointNotice":
            again = _wire.checkpoint_notice(ident, d["timeUnixNs"], cbor_decode(py)["step"],
                                            cbor_decode(py)["path"])
        else:
            p = cbor_decode(py)
            again = _wire.progress_notice(ident, d["timeUnixNs"], p["step"], p["state"],
                                          p.get("expectedSeconds", 0))
        self.assertEqual(again.hex(), cpp.hex())

    def test_progress_pause_checkpoint_and_finished(self) -> None:
        self.check(self.notify("progress", "--step", "41"), lambda: c4.progress(41))
        self.check(self.notify("progress", "--step", "300000", "--state", "checkpointing",
                               "--expect-seconds", "86400"),
                   lambda: c4.pause(86400, step=300000))
        self.check(self.notify("progress", "--step", "300000", "--state", "idle"),
                   lambda: c4.pause(reason="idle"))
        self.check(self.notify("progress", "--step", "300000", "--state", "training"),
                   c4.resume)
        self.check(self.notify("checkpoint", "--step", str(2**40), "--path", "/ckpt/é ü.pt"),
                   lambda: c4.checkpoint_saved(2**40, "/ckpt/é ü.pt"))
        self.check(self.notify("progress", "--step", "0", "--state", "finished"),
                   lambda: c4.finished(0))

    def test_identity_from_torchrun_and_untidy_names(self) -> None:
        set_env({"C4_RANK": None, "RANK": "5", "WORLD_SIZE": "4", "C4_POD_NAME": "Train_3.",
                 "C4_NODE_NAME": None, "C4_RESTART_ATTEMPT": "x"})
        self.check(self.notify("progress", "--step", "1"), lambda: c4.progress(1))


class ArgumentsTest(DatagramCase):
    """Bad arguments raise ValueError in c4-notify's words and send nothing."""

    def test_bad_arguments(self) -> None:
        cases = [
            (lambda: c4.progress(-1), "step must be a non-negative integer, got '-1'"),
            (lambda: c4.progress("12"), "step must be a non-negative integer"),
            (lambda: c4.progress(True), "step must be a non-negative integer"),
            (lambda: c4.progress(2**63), "step must be a non-negative integer"),
            (lambda: c4.pause(reason="sleeping"),
             "reason must be checkpointing, evaluating or idle, got 'sleeping'"),
            (lambda: c4.pause(reason="training"), "reason must be"),
            (lambda: c4.pause(0), "expect_seconds must be an integer in [1, 86400], got '0'"),
            (lambda: c4.pause(86401), "[1, 86400]"),
            (lambda: c4.pause(1.5), "[1, 86400]"),
            (lambda: c4.checkpoint_saved(1, ""), "checkpoint needs path"),
            (lambda: c4.checkpoint_saved(1, "x" * 4097), "at most 4096 bytes"),
            (lambda: c4.checkpoint_saved(1, "\udcff"), "UTF-8"),
            (lambda: c4.resume(-3), "non-negative"),
            (lambda: c4.phase("finished").__enter__(), "reason must be"),
        ]
        for call, want in cases:
            with self.subTest(want=want):
                with self.assertRaises(ValueError) as e:
                    call()
                self.assertIn(want, str(e.exception))
        self.assertNothingSent()

    def test_pause_without_a_step_uses_the_last_one(self) -> None:
        c4.progress(12)
        self.receive()
        c4.pause(30)
        d = cbor_decode(self.receive())
        self.assertEqual((d["step"], d["state"], d["expectedSeconds"]), (12, "checkpointing", 30))
        self.assertEqual(c4.last_step(), 12)


class NoNodePluginTest(EnvCase):
    """Without a node plugin the helper returns False, logs one warning, and never raises."""

    def test_missing_socket_returns_false(self) -> None:
        c4._warned = False
        with self.assertLogs("c4", "DEBUG") as logs:
            self.assertFalse(c4.progress(1))  # C4_AGENT_SOCKET unset
            set_env({"C4_AGENT_SOCKET": "/nonexistent/agent.sock"})
            self.assertFalse(c4.checkpoint_saved(1, "/x"))
            set_env({"C4_AGENT_SOCKET": "@c4-python-test-nobody-listens"})
            self.assertFalse(c4.pause(10))
            with c4.phase("evaluating"):
                pass
        warnings = [r for r in logs.records if r.levelname == "WARNING"]
        self.assertEqual(len(warnings), 1, logs.output)
        self.assertIn("C4_AGENT_SOCKET is unset", warnings[0].getMessage())
        self.assertIn("not delivered to /nonexistent/agent.sock", logs.output[1])

    def test_missing_identity_returns_false(self) -> None:
        set_env({"C4_AGENT_SOCKET": "@c4-python-test-nobody-listens", "C4_RANK": None})
        c4._warned = False
        with self.assertLogs("c4", "WARNING") as logs:
            self.assertFalse(c4.progress(1))
        self.assertIn("no rank: set C4_RANK or RANK", logs.output[0])


class LingerTest(DatagramCase):
    """A sender stays (at most half a second) until its datagram is read."""

    def test_exit_waits_for_the_read(self) -> None:
        child = subprocess.Popen(
            [sys.executable, "-c", "import c4; c4.finished(7)"],
            env={**os.environ, "PYTHONPATH": PACKAGE})
        self.addCleanup(child.wait)
        time.sleep(0.3)
        self.assertIsNone(child.poll(), "the helper exited with its notice unread")
        self.assertEqual(cbor_decode(self.receive())["state"], "finished")
        self.assertEqual(child.wait(5), 0)

    def test_an_unread_notice_holds_the_sender_at_most_half_a_second(self) -> None:
        start = time.monotonic()
        self.assertTrue(c4.progress(1))
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertGreaterEqual(time.monotonic() - start, 0.45)
        self.receive()


class TorchHooksTest(DatagramCase):
    """c4.torch: the plain-loop hook, and the Lightning callback on a stand-in Lightning."""

    def setUp(self) -> None:
        super().setUp()
        # Read as a node plugin would, at once (an unread notice holds its sender 0.5 s).
        self.got: "queue.Queue[bytes]" = queue.Queue()
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        self.addCleanup(reader.join)

    def _read(self) -> None:
        self.server.settimeout(None)
        while True:
            try:
                data = self.server.recv(_wire.MAX_DATAGRAM_BYTES)
            except OSError:
                return
            if not data:
                return
            self.got.put(data)

    def tearDown(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)

    def states(self, n: int) -> List[Any]:
        out = []
        for _ in range(n):
            d = cbor_decode(self.got.get(timeout=2))
            out.append((d["kind"], d["step"], d.get("state", d.get("path"))))
        return out

    def test_plain_loop(self) -> None:
        import c4.torch as hooks
        self.assertNotIn("torch", sys.modules, "c4.torch imported torch")
        set_env({"C4_RESUME_STEP": "199"})
        hook = hooks.C4StepHook(every_n_steps=100)
        self.assertEqual(hook.start_step, 200)
        for step in range(hook.start_step, 301):
            hook.step(step)
        with hook.checkpointing(expect_seconds=60):
            pass
        hook.saved("/ckpt/300.pt")
        hook.finished()
        self.assertEqual(self.states(6), [
            ("ProgressNotice", 200, "training"), ("ProgressNotice", 300, "training"),
            ("ProgressNotice", 300, "checkpointing"), ("ProgressNotice", 300, "training"),
            ("CheckpointNotice", 300, "/ckpt/300.pt"), ("ProgressNotice", 300, "finished")])

    def test_lightning_callback(self) -> None:
        import types
        fake = types.ModuleType("lightning.pytorch")
        fake.Callback = type("Callback", (), {})
        saved = {k: sys.modules.get(k) for k in ("lightning", "lightning.pytorch", "c4.torch")}
        sys.modules.update({"lightning": types.ModuleType("lightning"),
                            "lightning.pytorch": fake})
        sys.modules.pop("c4.torch", None)
        try:
            import c4.torch as hooks
            cb = hooks.C4Callback(every_n_steps=2)
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        self.assertIsInstance(cb, fake.Callback)
        ckpt = types.SimpleNamespace(last_model_path="", best_model_path="")
        trainer = types.SimpleNamespace(global_step=2, sanity_checking=False,
                                        checkpoint_callbacks=[ckpt])
        cb.on_train_batch_end(trainer, None, None, None, 0)
        cb.on_validation_start(trainer, None)
        cb.on_validation_end(trainer, None)
        cb.on_save_checkpoint(trainer, None, {})
        ckpt.last_model_path = "/ckpt/epoch=0-step=2.ckpt"
        trainer.global_step = 3
        cb.on_train_batch_end(trainer, None, None, None, 1)
        cb.on_fit_end(trainer, None)
        self.assertEqual(self.states(7), [
            ("ProgressNotice", 2, "training"), ("ProgressNotice", 2, "evaluating"),
            ("ProgressNotice", 2, "training"), ("ProgressNotice", 2, "checkpointing"),
            ("ProgressNotice", 2, "training"),
            ("CheckpointNotice", 3, "/ckpt/epoch=0-step=2.ckpt"),
            ("ProgressNotice", 3, "finished")])


class ResumeStepTest(unittest.TestCase):
    def test_resume_step(self) -> None:
        old = set_env({"C4_RESUME_STEP": None})
        self.addCleanup(set_env, old)
        self.assertIsNone(c4.resume_step())
        for text, want in (("1200", 1200), ("0", 0), (" 7\n", 7), ("", None)):
            set_env({"C4_RESUME_STEP": text})
            self.assertEqual(c4.resume_step(), want, text)
        for bad in ("-1", "12x", "1e3", "abc", "٣"):
            set_env({"C4_RESUME_STEP": bad})
            with self.assertRaises(ValueError) as e:
                c4.resume_step()
            self.assertIn("C4_RESUME_STEP must be a non-negative integer", str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
