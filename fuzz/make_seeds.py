#!/usr/bin/env python3
"""Writes the seed corpora of the text and handshake fuzzers (plan, fabric, kubeconfig,
trainingjob, handshake) under fuzz/corpus/. The report encodings' seeds come from c4-fuzz-seeds
(seeds.cc). Run from the repository root: fuzz/make_seeds.py"""
import json
import os
import struct

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


# Plan files: nccl-net-plugin/README.md's example and smaller ones.
write("plan", "readme", json.dumps({
    "version": 7, "default": {"subflows": 4}, "planes": {"node-a": 0, "node-b": 0},
    "pairs": [{"localNode": "node-a", "peerNode": "node-b", "subflows": [
        {"localPort": 41001, "pathId": 0, "weight": 1.0},
        {"localPort": 41002, "pathId": 1, "weight": 1.0},
        {"localPort": 41003, "pathId": 2, "weight": 0.0}]}]}, indent=1))
write("plan", "default-only", '{"version": 0, "default": {"subflows": 2}}')
write("plan", "two-pairs", json.dumps({"version": 3, "pairs": [
    {"localNode": "a", "peerNode": "b", "subflows": [{"localPort": 0}]},
    {"localNode": "b", "peerNode": "a", "subflows": [{"pathId": 5, "weight": 2.5}]}],
    "planes": {"a": 1, "b": 32767}}))

# Fabric: unit-tests/operator/c4p/fabric_test.cc's objects.
write("fabric", "cr", json.dumps({
    "apiVersion": "c4.dev/v1alpha1", "kind": "Fabric", "metadata": {"name": "default"},
    "spec": {"planes": 2, "spines": 4, "uplinksPerLeaf": 8, "uplinkSpeedGbps": 400,
             "hostLinkSpeedGbps": 200,
             "pathSelection": {"rule": "sourcePortModulo", "sourcePortModulo": {"base": 3}},
             "links": [{"leaf": "leaf-1", "uplink": 2, "capacityFraction": 0,
                        "reason": "cable cut"},
                       {"plane": 1, "leaf": "leaf-0", "uplink": 7, "direction": "Down",
                        "capacityFraction": 0.5}]}}))
write("fabric", "bare-spec", '{"spines": 2, "uplinksPerLeaf": 2, "uplinkSpeedGbps": 1}')
write("fabric", "table", json.dumps({"spines": 2, "uplinksPerLeaf": 2, "uplinkSpeedGbps": 100,
                                      "pathSelection": {"rule": "table", "table": [
                                          {"port": 40000, "path": 0},
                                          {"port": 40001, "path": 1}]}}))

# kubeconfig: unit-tests/kube/client/kube_config_test.cc's file.
CERT = "LS0tLS1CRUdJTiBDRVJULS0tLS0K"
KEY = "LS0tLS1CRUdJTiBLRVktLS0tLQo="
KUBECONFIG = f"""apiVersion: v1
kind: Config
current-context: main
clusters:
- name: c1
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: {CERT}
contexts:
- name: main
  context: {{cluster: c1, user: u1, namespace: team}}
- name: other
  context: {{cluster: c1, user: u2}}
users:
- name: u1
  user:
    client-certificate-data: {CERT}
    client-key-data: {KEY}
- name: u2
  user:
    token: other-token
"""
write("kubeconfig", "inline-certs", KUBECONFIG)
write("kubeconfig", "token", KUBECONFIG.replace("current-context: main", "current-context: other"))
write("kubeconfig", "files", """apiVersion: v1
current-context: c
clusters: [{name: k, cluster: {server: "https://k:443", certificate-authority: ca.crt,
  insecure-skip-tls-verify: "true", tls-server-name: kube}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {tokenFile: token, exec: {command: x}}}]
""")

# TrainingJob: crds/examples as the API server serves them (JSON).
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
examples = os.path.join(repo, "crds", "examples")
for name in sorted(os.listdir(examples)):
    with open(os.path.join(examples, name)) as f:
        for i, doc in enumerate(yaml.safe_load_all(f)):
            if doc and doc.get("kind") == "TrainingJob":
                doc["metadata"].update({"namespace": "ns1", "uid": "uid-1", "generation": 2})
                doc["status"] = {"attempt": 1, "startedIndexes": "0-3",
                                 "conditions": [{"type": "Running", "status": "True"}]}
                write("trainingjob", f"{os.path.splitext(name)[0]}-{i}", json.dumps(doc))
write("trainingjob", "minimal", json.dumps({
    "apiVersion": "c4.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "j", "namespace": "ns1", "labels": {"c4.dev/replica-index": "1"}},
    "spec": {"replicas": 2, "numProcPerNode": 2, "template": {"spec": {"containers": [
        {"name": "t", "image": "x", "env": [{"name": "A", "value": "1"}]}]}},
        "faultTolerance": {"failurePolicy": [{"action": "RestartJob", "exitCodes": [1, 2]}]}}}))
write("trainingjob", "index-set", "0-3,5,7-9\n{}")

# Handshake: [bytes per recv][hello or ack]; transport.cc's HelloFixed / AckFixed, little endian.
LISTEN_ID = 0x1122334455667788
def hello(index, n, node, pod, conn=42, rank=3):
    return struct.pack("<IHHHHHHQQiI", 0x4c483443, 2, index, n, len(node), len(pod), 0,
                       LISTEN_ID, conn, rank, 0) + node + pod
def ack(node, pod, rank=1):
    return struct.pack("<IHHHHi", 0x4b413443, 2, len(node), len(pod), 0, rank) + node + pod
write("handshake", "hello", b"\x00" + hello(0, 4, b"node-a", b"job-0"))
write("handshake", "hello-slow", b"\x07" + hello(3, 4, b"node-a", b"job-0"))
write("handshake", "hello-long-names", b"\x00" + hello(0, 64, b"n" * 253, b"p" * 253))
write("handshake", "ack", b"\x00" + ack(b"node-b", b"job-1"))
write("handshake", "ack-slow", b"\x03" + ack(b"node-b" * 40, b""))
