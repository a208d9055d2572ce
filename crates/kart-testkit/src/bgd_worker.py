"""Test scaffolding: a small worker ("bot") of the Remote Workers API for a BuildGrid
server on loopback, so that kart's executor tests and benchmarks run real remote
executions. It is not a production worker and kart does not depend on it: kart speaks
the Remote Execution API v2 only, so production workers (buildbox-worker and the like)
serve it unchanged. No BuildGrid release on PyPI ships a worker of its own, so this one
uses the generated protos BuildGrid ships.

One lease at a time: the bot long-polls `CreateBotSession`/`UpdateBotSession`; for a
lease it reads the Action, its Command and its input root from CAS (files kept in a
cache folder by digest and hard-linked into each action's folder), runs the command in
a fresh temp folder with only the Command's environment, uploads the output files,
stdout and stderr, and reports the ActionResult in the lease. While the command runs it
keeps the session alive.

Modes for failure tests (`--mode`):
  normal   run the command
  corrupt  run it, then flip one byte of every output file ending in `.cubin`
  die      take a lease, start the command, then kill it and exit at once (a worker
           lost mid-action)
  hang     take a lease and never finish it, still answering keepalives

Run with BuildGrid's Python:  python bgd_worker.py --server 127.0.0.1:PORT --cache DIR
"""

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
    remote_execution_pb2_grpc as re_grpc,
)
from buildgrid._protos.google.bytestream import (
    bytestream_pb2 as bs_pb2,
    bytestream_pb2_grpc as bs_grpc,
)
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import (
    bots_pb2,
    bots_pb2_grpc,
)

# Blobs up to this size go through the batch calls; larger ones through ByteStream.
BATCH_LIMIT = 1 << 20
CHUNK = 1 << 20
LEASE_PENDING = 1
LEASE_ACTIVE = 2
LEASE_COMPLETED = 4
BOT_OK = 1


def log(message):
    print(f"bgd_worker: {message}", file=sys.stderr, flush=True)


class Cas:
    def __init__(self, channel, instance, cache):
        self.cas = re_grpc.ContentAddressableStorageStub(channel)
        self.bytestream = bs_grpc.ByteStreamStub(channel)
        self.instance = instance
        self.cache = cache
        os.makedirs(cache, exist_ok=True)

    def resource(self, digest):
        name = f"blobs/{digest.hash}/{digest.size_bytes}"
        return f"{self.instance}/{name}" if self.instance else name

    def cached(self, digest):
        return os.path.join(self.cache, f"{digest.hash}_{digest.size_bytes}")

    def read(self, digest):
        path = self.cached(digest)
        if os.path.exists(path):
            with open(path, "rb") as f:
                return f.read()
        self.fetch([digest])
        with open(path, "rb") as f:
            return f.read()

    def fetch(self, digests):
        """Brings every blob of `digests` into the cache folder, checking each hash."""
        wanted = {}
        for d in digests:
            if not os.path.exists(self.cached(d)):
                wanted[(d.hash, d.size_bytes)] = d
        small = [d for d in wanted.values() if d.size_bytes <= BATCH_LIMIT]
        large = [d for d in wanted.values() if d.size_bytes > BATCH_LIMIT]
        batch, total = [], 0
        for d in small + [None]:
            if d is None or total + d.size_bytes > 3 * BATCH_LIMIT:
                if batch:
                    reply = self.cas.BatchReadBlobs(
                        re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=batch)
                    )
                    for r in reply.responses:
                        if r.status.code != 0:
                            raise RuntimeError(f"cannot read blob {r.digest.hash}: {r.status.message}")
                        self.store(r.digest, r.data)
                batch, total = [], 0
            if d is not None:
                batch.append(d)
                total += d.size_bytes
        for d in large:
            parts = []
            for reply in self.bytestream.Read(bs_pb2.ReadRequest(resource_name=self.resource(d))):
                parts.append(reply.data)
            self.store(d, b"".join(parts))

    def store(self, digest, data):
        if hashlib.sha256(data).hexdigest() != digest.hash or len(data) != digest.size_bytes:
            raise RuntimeError(f"blob {digest.hash} arrived damaged")
        path = self.cached(digest)
        tmp = f"{path}.{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)

    def upload(self, blobs):
        """Uploads `blobs` (a list of bytes) that the server lacks."""
        by_hash = {hashlib.sha256(b).hexdigest(): b for b in blobs}
        if not by_hash:
            return
        digests = [re_pb2.Digest(hash=h, size_bytes=len(b)) for h, b in by_hash.items()]
        missing = self.cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(instance_name=self.instance, blob_digests=digests)
        ).missing_blob_digests
        for d in missing:
            data = by_hash[d.hash]
            if d.size_bytes <= BATCH_LIMIT:
                request = re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance)
                request.requests.add(digest=d, data=data)
                for r in self.cas.BatchUpdateBlobs(request).responses:
                    if r.status.code != 0:
                        raise RuntimeError(f"cannot upload blob {d.hash}: {r.status.message}")
            else:
                name = f"uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
                if self.instance:
                    name = f"{self.instance}/{name}"

                def requests():
                    offset = 0
                    while True:
                        piece = data[offset : offset + CHUNK]
                        last = offset + len(piece) >= len(data)
                        yield bs_pb2.WriteRequest(
                            resource_name=name, write_offset=offset, finish_write=last, data=piece
                        )
                        offset += len(piece)
                        if last:
                            return

                self.bytestream.Write(requests())


def digest_of(data):
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def flip_code_byte(data):
    """`data` (an ELF cubin) with one byte of its first code section (`.text.*`)
    flipped: still a well-formed cubin with the same entries, but other bytes (the
    middle of the file when no code section is found)."""
    at = len(data) // 2
    try:
        shoff = int.from_bytes(data[0x28:0x30], "little")
        shentsize = int.from_bytes(data[0x3A:0x3C], "little")
        shnum = int.from_bytes(data[0x3C:0x3E], "little")
        shstrndx = int.from_bytes(data[0x3E:0x40], "little")

        def section(i):
            h = data[shoff + i * shentsize : shoff + (i + 1) * shentsize]
            name = int.from_bytes(h[0:4], "little")
            offset = int.from_bytes(h[0x18:0x20], "little")
            size = int.from_bytes(h[0x20:0x28], "little")
            return name, offset, size

        _, strings, _ = section(shstrndx)
        for i in range(shnum):
            name, offset, size = section(i)
            end = data.index(b"\0", strings + name)
            if data[strings + name : end].startswith(b".text") and size > 0:
                at = offset + size // 2
                break
    except (ValueError, IndexError):
        pass
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def lay_out(cas, root_digest, folder):
    """Writes the input root `root_digest` into `folder`."""
    directories = {}
    pending = [root_digest]
    while pending:
        cas.fetch(pending)
        next_round = []
        for d in pending:
            directory = re_pb2.Directory()
            directory.ParseFromString(cas.read(d))
            directories[d.hash] = directory
            for sub in directory.directories:
                if sub.digest.hash not in directories:
                    next_round.append(sub.digest)
        pending = next_round
    files = [f.digest for d in directories.values() for f in d.files]
    cas.fetch(files)

    def write(digest, path):
        directory = directories[digest.hash]
        os.makedirs(path, exist_ok=True)
        for f in directory.files:
            target = os.path.join(path, f.name)
            source = cas.cached(f.digest)
            if f.is_executable:
                executable = source + ".x"
                if not os.path.exists(executable):
                    tmp = f"{executable}.{uuid.uuid4().hex}"
                    shutil.copyfile(source, tmp)
                    os.chmod(tmp, 0o555)
                    os.replace(tmp, executable)
                source = executable
            os.link(source, target)
        for s in directory.symlinks:
            os.symlink(s.target, os.path.join(path, s.name))
        for sub in directory.directories:
            write(sub.digest, os.path.join(path, sub.name))

    write(root_digest, folder)


class Running:
    """One lease's command, run on a thread so the session stays alive meanwhile."""

    def __init__(self, cas, lease, bot_id, mode):
        self.cas = cas
        self.lease = lease
        self.bot_id = bot_id
        self.mode = mode
        self.result = None
        self.error = None
        self.process = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def done(self):
        return not self.thread.is_alive()

    def run(self):
        try:
            self.result = self.execute()
        except Exception as e:  # reported to the server as the lease's status
            self.error = f"{type(e).__name__}: {e}"
            log(f"lease {self.lease.id} failed: {self.error}")
        finally:
            self.started.set()

    def execute(self):
        action = re_pb2.Action()
        if not self.lease.payload.Unpack(action):
            digest = re_pb2.Digest()
            if not self.lease.payload.Unpack(digest):
                raise RuntimeError("the lease's payload is neither an Action nor a Digest")
            action.ParseFromString(self.cas.read(digest))
        command = re_pb2.Command()
        command.ParseFromString(self.cas.read(action.command_digest))
        work = tempfile.mkdtemp(prefix="bgd-action-")
        try:
            root = os.path.join(work, "root")
            lay_out(self.cas, action.input_root_digest, root)
            outputs = list(command.output_paths) or (
                list(command.output_files) + list(command.output_directories)
            )
            cwd = os.path.join(root, command.working_directory)
            for out in outputs:
                os.makedirs(os.path.dirname(os.path.join(cwd, out)) or cwd, exist_ok=True)
            argv = list(command.arguments)
            if "/" in argv[0] and not os.path.isabs(argv[0]):
                argv[0] = os.path.join(cwd, argv[0])
            env = {v.name: v.value for v in command.environment_variables}
            timeout = action.timeout.seconds or None
            self.process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            self.started.set()
            try:
                stdout, stderr = self.process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                stdout, stderr = self.process.communicate()
            blobs = []
            result = re_pb2.ActionResult(exit_code=self.process.returncode)
            for out in outputs:
                path = os.path.join(cwd, out)
                if not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    data = f.read()
                if self.mode == "corrupt" and out.endswith(".cubin") and data:
                    data = flip_code_byte(data)
                d = digest_of(data)
                blobs.append(data)
                result.output_files.add(
                    path=out, digest=d, is_executable=os.access(path, os.X_OK)
                )
            for data, field in ((stdout, "stdout_digest"), (stderr, "stderr_digest")):
                d = digest_of(data)
                blobs.append(data)
                getattr(result, field).CopyFrom(d)
            self.cas.upload(blobs)
            result.execution_metadata.worker = self.bot_id
            return result
        finally:
            shutil.rmtree(work, ignore_errors=True)


class Hung:
    """A lease taken and never finished (`--mode hang`)."""

    def __init__(self, lease):
        self.lease = lease


def main():
    parser = argparse.ArgumentParser(description="a test worker for BuildGrid (test scaffolding)")
    parser.add_argument("--server", required=True, help="HOST:PORT of the BuildGrid server")
    parser.add_argument("--instance", default="", help="the instance name")
    parser.add_argument("--bot-id", default=f"kart-test-bot-{os.getpid()}")
    parser.add_argument("--cache", required=True, help="a folder for the worker's blob cache")
    parser.add_argument("--mode", choices=["normal", "corrupt", "die", "hang"], default="normal")
    args = parser.parse_args()

    channel = grpc.insecure_channel(
        args.server,
        options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)],
    )
    cas = Cas(channel, args.instance, args.cache)
    bots = bots_pb2_grpc.BotsStub(channel)
    session = bots_pb2.BotSession(bot_id=args.bot_id, status=BOT_OK)
    running = None
    while True:
        try:
            if not session.name:
                session = bots.CreateBotSession(
                    bots_pb2.CreateBotSessionRequest(parent=args.instance, bot_session=session),
                    timeout=10,
                )
                log(f"session {session.name}")
            else:
                session = bots.UpdateBotSession(
                    bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session),
                    timeout=10,
                )
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                continue
            log(f"server: {e.code()}: {e.details()}")
            if e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
                session = bots_pb2.BotSession(bot_id=args.bot_id, status=BOT_OK)
                running = None
            time.sleep(0.5)
            continue
        leases = [x for x in session.leases if x.state in (LEASE_PENDING, LEASE_ACTIVE)]
        if not leases:
            running = None
            continue
        lease = leases[0]
        if running is None or running.lease.id != lease.id:
            lease.state = LEASE_ACTIVE
            log(f"lease {lease.id}")
            if args.mode == "hang":
                running = Hung(lease)
                continue
            running = Running(cas, lease, args.bot_id, args.mode)
            if args.mode == "die":
                running.started.wait(60)
                if running.process is not None:
                    os.killpg(running.process.pid, signal.SIGKILL)
                log("exiting mid-action on purpose (--mode die)")
                os._exit(3)
        if args.mode == "hang":
            time.sleep(1)
            continue
        deadline = time.monotonic() + 2
        while not running.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        if running.done():
            lease.state = LEASE_COMPLETED
            if running.result is not None:
                lease.status.code = 0
                lease.result.Pack(running.result)
            else:
                lease.status.code = 13  # INTERNAL: the server may retry it elsewhere
                lease.status.message = running.error or "the worker failed"
            log(f"lease {lease.id} done")


if __name__ == "__main__":
    main()
