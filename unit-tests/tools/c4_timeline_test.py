#!/usr/bin/env python3
"""tools/c4-timeline.py: the picture has one line segment per rank and attempt, every mark, the
time-lost span, and refuses bad input with a message and exit 2 (writing nothing)."""
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                    "c4-timeline.py")
NS = {"s": "http://www.w3.org/2000/svg"}


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


class TimelineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.steps = os.path.join(self.dir.name, "steps")
        os.mkdir(self.steps)
        self.out = os.path.join(self.dir.name, "t.svg")
        t0 = 1764770000.0
        # Two ranks: steps 1..30, a fault at +31 s, resume from 20 at +50 s, on to 40.
        for rank in (0, 1):
            with open(os.path.join(self.steps, f"rank-{rank}.steps"), "w") as f:
                for s in range(1, 31):
                    f.write(f"{t0 + s:.3f} {s}\n")
                for k, s in enumerate(range(20, 41)):
                    f.write(f"{t0 + 50 + k:.3f} {s}\n")
        self.t0 = t0

    def tearDown(self):
        self.dir.cleanup()

    def test_draws_ranks_attempts_and_marks(self):
        r = run("--steps", self.steps, "-o", self.out, "--title", "demo",
                "--mark", f"{self.t0 + 31}=fault injected",
                "--mark", "2025-12-03T13:53:55.5Z=C4D verdict (Event FaultDetected)",
                "--mark", f"{self.t0 + 50}=running again")
        self.assertEqual(r.returncode, 0, r.stderr)
        root = ET.parse(self.out).getroot()
        lines = root.findall("s:polyline[@class='rank']", NS)
        # Each rank: one segment before the fault and one after the resume.
        self.assertEqual(sorted(l.get("data-rank") for l in lines), ["0", "0", "1", "1"])
        self.assertEqual(len(lines[0].get("points").split()), 30)
        self.assertEqual(len(root.findall("s:line[@class='mark']", NS)), 3)
        texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
        self.assertIn("fault injected (+30.0 s)", texts)
        self.assertIn("running again (+49.0 s)", texts)
        self.assertIn("19.0 s lost", texts)  # the shaded time lost
        self.assertEqual(len(root.findall("s:rect[@class='lost']", NS)), 1)
        colours = {l.get("stroke") for l in root.findall("s:line[@class='mark']", NS)}
        self.assertEqual(len(colours), 3, "fault, verdict and running marks share a colour")

    def test_bad_input_is_refused_and_writes_nothing(self):
        empty = os.path.join(self.dir.name, "empty")
        os.mkdir(empty)
        for args, want in ((["--steps", empty], "no rank-<r>.steps"),
                           (["--steps", self.steps, "--mark", "soon=fault"], "neither unix"),
                           (["--steps", self.steps, "--mark", "123"], "not WHEN=LABEL")):
            r = run(*args, "-o", self.out)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(want, r.stderr)
            self.assertFalse(os.path.exists(self.out))
        with open(os.path.join(self.steps, "rank-2.steps"), "w") as f:
            f.write("12.5 x\n")
        r = run("--steps", self.steps, "-o", self.out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("rank-2.steps:1", r.stderr)


if __name__ == "__main__":
    unittest.main()
