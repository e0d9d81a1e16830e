#!/usr/bin/env python3
"""Splits the client threads' samples of a `perf record -g` file into kinds
of work: the kernel's send path (writev down to the loopback delivery that
the sender runs), reads, thread wake-ups, sleeping in epoll, scheduling,
memory management, and in user space malloc/free, the tokio runtime,
futures combinators, the redis crate (and rslock), redis-lock-client, and
the rest. Used by bench/profile/clients.sh; the percentages are of the
client threads' samples (comm `tokio-rt-worker`), not of the whole file.

    classes.py perf.data [comm]
"""
import collections
import subprocess
import sys

KERNEL = [
    ("send (writev, with the loopback delivery it runs)",
     ["tcp_sendmsg", "do_writev", "sock_write_iter", "ksys_write"]),
    ("read", ["tcp_recvmsg", "sock_read_iter", "ksys_read"]),
    ("memory (page faults, mprotect, mmap)",
     ["exc_page_fault", "mprotect", "munmap", "mmap", "brk", "madvise"]),
    ("futex (waking and parking threads)", ["futex"]),
    ("epoll_wait", ["epoll_wait"]),
    ("scheduling", ["schedule", "finish_task_switch"]),
]
USER = [
    ("malloc/free/memcpy",
     ["malloc", "free", "realloc", "_int_", "unlink_chunk", "memmove", "memcpy",
      "memset", "__rdl_", "__rust_alloc", "__rust_dealloc"]),
    ("redis-lock-client", ["redis_lock_client"]),
    ("redis crate, rslock, RESP parsing", ["redis::", "rslock", "combine::"]),
    ("tokio runtime", ["tokio"]),
    ("futures combinators", ["futures"]),
]


def kind(sample):
    frames = [line.strip() for line in sample.strip().split("\n") if line.strip()]
    if not frames:
        return None
    leaf = frames[0]
    if "[kernel.kallsyms]" in leaf:
        chain = " ".join(frames)
        for name, marks in KERNEL:
            if any(mark in chain for mark in marks):
                return "kernel: " + name
        return "kernel: other"
    for name, marks in USER:
        if any(mark in leaf for mark in marks):
            return "user: " + name
    return "user: other"


def main():
    path = sys.argv[1]
    comm = sys.argv[2] if len(sys.argv) > 2 else "tokio-rt-worker"
    script = subprocess.run(
        ["perf", "script", "-i", path, "--comm", comm, "-F", "ip,sym,dso"],
        capture_output=True, text=True, check=True).stdout
    counts = collections.Counter(filter(None, map(kind, script.split("\n\n"))))
    total = sum(counts.values())
    if total == 0:
        sys.exit(f"no samples of {comm} in {path}")
    for name, count in counts.most_common():
        print(f"{100 * count / total:5.1f}%  {name}")
    print(f"({total} samples of {comm})")


if __name__ == "__main__":
    main()
