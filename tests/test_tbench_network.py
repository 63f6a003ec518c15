"""Network as Harbor gives it: the agent and the verifier of a task with network (Harbor's default
network_mode "public", harbor/models/task/config.py EnvironmentConfig) reach what the runner's
network reaches, so a test.sh that installs its verifier toolchain over the network (Terminal-
Bench 2.0's `curl ... | sh` then a fetched tool) runs as under Harbor; where the install host
cannot be reached, the trial is an environment error naming it, never a score.

The network is a private one: a named network namespace with only its loopback interface up,
holding a local HTTP server that stands in for the install URL and a package index. The host's
own network never sees it, which is what the unreachable case uses.

Without a named namespace, a sandbox's "public" network is a namespace of its own that slirp4netns
connects to the outside (as Docker's bridge): the attack tests below start services on the host's
127.0.0.1 and an abstract unix socket and find them out of reach of the agent, the verifier, a RUN
step and an ADD of a URL; the stand-in download servers listen on the host's network address."""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import needs_bwrap
from local_registry import free_port
from termforge.evals.harbor_tasks import (NativeOptions, build_harbor_image, load_harbor_task, native_blocker,
                                          verifier_apt_packages)
from termforge.evals.tbench import noop_agent, oracle_agent, run_native
from termforge.images.dockerfile import HOST_CA_BUNDLES

needs_netns = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                 reason="private network namespaces need root and iproute2")
ANSWER = "tf-net-answer-31"


@pytest.fixture
def private_network(tmp_path):
    """(namespace name, port): a network namespace with loopback only, serving tmp_path/www on
    127.0.0.1:port inside it; the same port is free on the host's loopback."""
    name = f"tftest{os.getpid()}{secrets.token_hex(3)}"
    port = free_port()
    www = tmp_path / "www"
    (www / "simple" / "tf-verify").mkdir(parents=True)
    (www / "install.sh").write_text(
        "#!/bin/sh\nset -e\nmkdir -p \"$HOME/.local/bin\"\n"
        f"curl -fsS http://127.0.0.1:{port}/simple/tf-verify/tf-verify -o \"$HOME/.local/bin/tf-verify\"\n"
        "chmod +x \"$HOME/.local/bin/tf-verify\"\n"
        "echo 'export PATH=\"$HOME/.local/bin:$PATH\"' > \"$HOME/.local/bin/env\"\n")
    (www / "simple" / "tf-verify" / "tf-verify").write_text(f"#!/bin/sh\n[ \"$(cat \"$1\")\" = {ANSWER} ]\n")
    (www / "answer").write_text(ANSWER + "\n")
    subprocess.run(["ip", "netns", "add", name], check=True)
    server = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        server = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-u", "-m", "http.server", str(port),
                                   "--bind", "127.0.0.1", "--directory", str(www)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            probe = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c",
                                    f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"],
                                   capture_output=True)
            if probe.returncode == 0:
                break
            assert time.monotonic() < deadline and server.poll() is None, "the namespace's HTTP server did not start"
            time.sleep(0.1)
        yield name, port
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        subprocess.run(["ip", "netns", "delete", name], check=False)


def _install_task(root: Path, port: int, network_mode: str | None = None) -> Path:
    """A TB2-shaped task: the image installs curl; the oracle fetches its answer over the network;
    test.sh installs its checker from the install URL and runs it (the curl | sh, source env, run
    preamble of Terminal-Bench 2.0's test.sh)."""
    d = root / f"net-install-{network_mode or 'default'}"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "instruction.md").write_text("Fetch the answer and write it to /app/answer.txt.\n")
    (d / "task.toml").write_text('version = "1.0"\n' + (f'[environment]\nnetwork_mode = "{network_mode}"\n'
                                                         if network_mode else ""))
    # The image has no curl: test.sh installs it with apt-get, as Terminal-Bench 2.0's does.
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\ncurl -fsS http://127.0.0.1:{port}/answer -o /app/answer.txt\n")
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        "apt-get update\n"
        "apt-get install -y curl\n"
        f"curl -LsSf http://127.0.0.1:{port}/install.sh | sh\n"
        "source $HOME/.local/bin/env\n"
        "tf-verify /app/answer.txt\n"
        "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    return d


def _run(task_dir: Path, tmp: Path, options: NativeOptions) -> dict:
    task = load_harbor_task(task_dir)
    return {name: run_native([task], agent, 1, tmp / "images", tmp / "jobs" / f"{name}-{secrets.token_hex(2)}",
                             options=options) for name, agent in (("oracle", oracle_agent), ("noop", noop_agent))}


@needs_bwrap
@needs_netns
def test_a_test_sh_installing_its_toolchain_runs_where_the_network_reaches(tmp_path, private_network):
    name, port = private_network
    task_dir = _install_task(tmp_path / "tasks", port)
    task = load_harbor_task(task_dir)
    assert task.network_mode == "public" and native_blocker(task) is None
    assert verifier_apt_packages(task) == ["curl"]

    reached = _run(task_dir, tmp_path, NativeOptions(network_namespace=name))
    assert {k: [t.reward for t in r.trials] for k, r in reached.items()} == {"oracle": [1.0], "noop": [0.0]}, \
        {k: r.table() for k, r in reached.items()}

    # The host's network does not reach the install URL: an environment error naming it, for
    # the oracle as for the no-op agent, never a reward.
    unreached = _run(task_dir, tmp_path, NativeOptions(network_namespace=None))
    for result in unreached.values():
        (trial,) = result.trials
        assert trial.reward is None and trial.error_kind == "environment", result.table()
        assert trial.exception_type == "VerifierNetworkError"
        assert f"127.0.0.1:{port}" in trial.exception_message and "does not reach" in trial.exception_message


@needs_bwrap
def test_a_task_without_network_that_installs_its_verifier_is_refused_up_front(tmp_path):
    """network_mode no-network: the install could never happen (Harbor's docker-compose-no-network
    gives the container network_mode none), so the task is an environment error before building,
    and the line names the task's network_mode and the test.sh line."""
    task = load_harbor_task(_install_task(tmp_path / "tasks", 1, "no-network"))
    built = build_harbor_image(task, tmp_path / "images")
    assert not built.ok
    assert "tests/test.sh line 2 installs its verifier toolchain at run time (apt-get update)" in built.reason
    assert "network_mode is no-network" in built.reason


def test_a_missing_network_namespace_is_bad_input_naming_the_key(tmp_path):
    from termforge.errors import TermforgeError

    with pytest.raises(TermforgeError, match=r"eval.tbench.network_namespace: no network namespace 'tf-absent-ns'"):
        run_native([], oracle_agent, 1, tmp_path / "images", tmp_path / "job",
                   options=NativeOptions(network_namespace="tf-absent-ns"))
    with pytest.raises(TermforgeError, match="is not a network namespace name"):
        NativeOptions(network_namespace="../../proc/1/ns/net").netns_path()


def host_address() -> str | None:
    """The host's own non-loopback IPv4 address: the source address a UDP socket "connected" to a
    public address gets (nothing is sent). A public-network sandbox reaches it as any machine on
    the network would, through slirp4netns's NAT; the host's 127.0.0.1 it never reaches."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.123", 9))  # TEST-NET-1: routed by the default route, never contacted
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.fixture
def host_http(tmp_path):
    """(address, port, www): a local HTTP server on the host's non-loopback address standing in
    for a download URL (a sandbox's network is a namespace of its own: the host's loopback is out
    of its reach, as a container's is)."""
    address = host_address()
    if address is None:
        pytest.skip("the host has no non-loopback IPv4 address for a stand-in server a sandbox can reach")
    port = free_port()
    www = tmp_path / "build-www"
    www.mkdir()
    (www / "tool").write_text(f"#!/bin/sh\necho {ANSWER}\n")
    (www / "data.txt").write_text("fetched-by-add\n")
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", str(port), "--bind", address,
                               "--directory", str(www)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((address, port), 1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the HTTP server did not start"
                time.sleep(0.1)
        yield address, port, www
    finally:
        server.terminate()
        server.wait(10)


def _fetching_build_task(root: Path, address: str, port: int) -> Path:
    """A task whose Dockerfile fetches its tool at build time (RUN curl, ADD of a URL) and records
    the CA bundle its RUN steps see; the oracle runs the tool."""
    d = root / "build-fetch"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "instruction.md").write_text("Run the tool; write what it prints to /app/answer.txt.\n")
    (d / "task.toml").write_text('version = "1.0"\n')
    (d / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y curl ca-certificates\n"
        f"RUN curl -fsS http://{address}:{port}/tool -o /usr/local/bin/tool && chmod 755 /usr/local/bin/tool\n"
        f"ADD http://{address}:{port}/data.txt /opt/data.txt\n"
        "RUN sha256sum < /etc/ssl/certs/ca-certificates.crt | cut -d' ' -f1 > /opt/step-ca.sum\nWORKDIR /app\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\ntool > /app/answer.txt\n")
    (d / "tests" / "test.sh").write_text(
        f"#!/bin/bash\nif [ \"$(cat /app/answer.txt)\" = {ANSWER} ] && [ \"$(cat /opt/data.txt)\" = fetched-by-add ]; "
        "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    return d


@needs_bwrap
def test_the_dockerfile_build_gets_the_network_and_the_hosts_ca_bundle(tmp_path, host_http):
    """RUN curl and ADD of a URL reach a stand-in for the download host on the host's network
    address (the build's namespace is its own, connected by slirp4netns, as `docker build`'s
    bridge is); each RUN step sees the host's CA bundle, bound read-only (a TLS-intercepting
    proxy's root is only there), which the image never keeps."""
    import hashlib

    address, port, _www = host_http
    task_dir = _fetching_build_task(tmp_path / "tasks", address, port)
    scores = {name: [t.reward for t in r.trials] for name, r in _run(task_dir, tmp_path, NativeOptions()).items()}
    assert scores == {"oracle": [1.0], "noop": [0.0]}, scores
    built = build_harbor_image(load_harbor_task(task_dir), tmp_path / "images")
    rootfs = Path(built.image.rootfs)
    host_ca = next(Path(c) for c in HOST_CA_BUNDLES if Path(c).is_file()).read_bytes()
    # The image keeps its own bundle (the one its ca-certificates wrote), not the host's.
    image_ca = (rootfs / "etc/ssl/certs/ca-certificates.crt").read_bytes()
    if image_ca == host_ca:
        pytest.skip("the host's CA bundle is byte for byte the image's: which one a step saw cannot be told")
    assert (rootfs / "opt/step-ca.sum").read_text().split() == [hashlib.sha256(host_ca).hexdigest()]


@needs_bwrap
def test_an_offline_build_refuses_a_fetching_step_up_front(tmp_path, host_http):
    address, port, _www = host_http
    task = load_harbor_task(_fetching_build_task(tmp_path / "tasks", address, port))
    built = build_harbor_image(task, tmp_path / "images", options=NativeOptions(build_network=False))
    assert not built.ok and "needs network at build time" in built.reason and "build_network: false" in built.reason


# -- a public network is a namespace of the sandbox's own ---------------------------------------------
# Harbor's "public" network (and the Dockerfile build's) is Docker's bridge: the container's own
# network namespace with NAT to the outside. Sharing the host's namespace instead would hand task
# code every service on the host's 127.0.0.1 (a policy server, a registry, a database) and every
# abstract unix socket of the host (those are per network namespace).

SECRET = "tf-host-only-secret-58"
PROBE = """import json, socket, sys
port, name = int(sys.argv[1]), sys.argv[2]
def tcp(host):
    try:
        with socket.create_connection((host, port), 3) as s:
            return s.recv(64).decode()
    except OSError as exc:
        return "unreached: " + type(exc).__name__
out = {"loopback": tcp("127.0.0.1"), "gateway": tcp("10.0.2.2")}
try:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
        u.settimeout(3)
        u.connect("\\0" + name)
        out["abstract"] = u.recv(64).decode()
except OSError as exc:
    out["abstract"] = "unreached: " + type(exc).__name__
print("PROBE " + json.dumps(out))
"""


def _slirps() -> set[int]:
    """The slirp4netns processes on this host (their pids)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() == "slirp4netns":
                        found.add(int(entry))
            except OSError:
                pass
    return found


@pytest.fixture
def no_leaked_slirp():
    """Every slirp4netns a test started is gone (ended and reaped) when it ends."""
    before = _slirps()
    yield
    deadline = time.monotonic() + 5
    while _slirps() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _slirps() - before, "slirp4netns processes leaked"


@pytest.fixture
def host_services():
    """(port, name): a TCP service on the host's 127.0.0.1:port and an abstract unix socket
    `@name`, each answering SECRET to whoever connects."""
    import threading

    port = free_port()
    name = f"tf-host-abstract-{os.getpid()}-{secrets.token_hex(3)}"
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", port))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + name)
    stop = threading.Event()

    def serve(listener):
        listener.listen(8)
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(SECRET.encode())

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in (tcp, unix)]
    for t in threads:
        t.start()
    # The services answer on the host: what the sandbox is denied is really there.
    with socket.create_connection(("127.0.0.1", port), 3) as c:
        assert c.recv(64).decode() == SECRET
    try:
        yield port, name
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        tcp.close()
        unix.close()


def _probe_results(output: str) -> dict:
    import json

    lines = [ln for ln in output.splitlines() if ln.startswith("PROBE ")]
    assert lines, output[-2000:]
    return json.loads(lines[-1][len("PROBE "):])


def _public_task(root: Path, extra: str = "", files: dict | None = None) -> Path:
    """A tb-mini task (python3 in its image) with Harbor's default network_mode, "public"."""
    d = root / "public-net"
    shutil.copytree(Path(__file__).resolve().parents[1] / "benchmarks" / "tb-mini" / "log-error-summary", d)
    toml = d / "task.toml"
    toml.write_text(toml.read_text().replace("allow_internet = false\n", ""))
    dockerfile = d / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + extra)
    for rel, text in (files or {}).items():
        (d / "environment" / rel).write_text(text)
    return d


@needs_bwrap
def test_a_public_network_session_cannot_reach_the_hosts_loopback_or_abstract_sockets(tmp_path, host_services,
                                                                                      no_leaked_slirp):
    """The agent's shell and the verifier's sandbox of a task with network reach neither a service
    on the host's 127.0.0.1 (nor through slirp's gateway 10.0.2.2: --disable-host-loopback) nor an
    abstract unix socket of the host; a sandbox killed on its timeout leaves no slirp4netns."""
    from termforge.evals.harbor_tasks import start_harbor_session
    from termforge.runtime.base import Limits

    port, name = host_services
    task = load_harbor_task(_public_task(tmp_path / "tasks"))
    assert task.network_mode == "public"
    built = build_harbor_image(task, tmp_path / "images")
    assert built.ok, built.reason
    assert built.image.allow_network
    (tmp_path / "probe.py").write_text(PROBE)
    session = start_harbor_session(built.image, Limits(wall_sec=60, cpu_sec=60, memory_mb=1024, disk_mb=64))
    try:
        session.copy_in(tmp_path / "probe.py", "/app/tf-probe.py")
        verifier = session.exec(f"python3 /app/tf-probe.py {port} {name}", timeout=60)
        shell = session.open_shell()
        try:
            agent = shell.run(f"python3 /app/tf-probe.py {port} {name}", timeout=60)
            # The shell's network is up and its own: an interface besides lo, slirp's resolver.
            seen = shell.run("cat /etc/resolv.conf; tail -n +3 /proc/net/dev | cut -d: -f1", timeout=30)
        finally:
            shell.close()
        timed_out = session.exec("sleep 30", timeout=2)
    finally:
        session.stop()
    for who, res in (("verifier", verifier), ("agent", agent)):
        found = _probe_results(res.stdout + "\n" + res.stderr)
        assert SECRET not in str(found), f"the {who}'s sandbox reached a host-only service: {found}"
        assert all(v.startswith("unreached") for v in found.values()), (who, found)
    assert "nameserver 10.0.2.3" in seen.stdout and "tap0" in seen.stdout, seen.stdout
    assert timed_out.timed_out


@needs_bwrap
def test_a_public_network_is_up_before_the_command_runs(tmp_path, no_leaked_slirp):
    """The command's first act already sees its network configured (tap0 with slirp's address):
    bwrap holds the command (--block-fd) until slirp4netns is ready, and slirp4netns starts only
    once bwrap has set the loopback up (the two configuring the namespace at once fail bwrap)."""
    from termforge.evals.harbor_tasks import start_harbor_session

    built = build_harbor_image(load_harbor_task(_public_task(tmp_path / "tasks")), tmp_path / "images")
    assert built.ok, built.reason
    session = start_harbor_session(built.image)
    try:
        runs = [session.exec("cat /proc/net/route /proc/net/fib_trie", timeout=30) for _ in range(20)]
    finally:
        session.stop()
    for res in runs:
        assert res.exit_code == 0, res.stderr
        assert "tap0" in res.stdout and "10.0.2.100" in res.stdout, res.stdout


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_slirp4netns_starts_only_once_the_sandboxs_loopback_is_up(no_leaked_slirp):
    """bwrap reports the sandbox's pid while its child still sets lo up over netlink; slirp4netns
    --configure sets lo up too, and both at once fail bwrap ("loopback: Failed RTM_NEWADDR") now
    and then. A sandbox whose loopback never comes up (a bare namespace standing in for bwrap's
    child) must never get a slirp4netns."""
    import json

    from termforge.runtime.process import PublicNetwork

    net = PublicNetwork()
    sandbox = subprocess.Popen(["unshare", "--user", "--map-root-user", "--net", "sleep", "2"])
    try:
        deadline = time.monotonic() + 10
        # Its own namespace first: slirp4netns must never be pointed at the host's.
        while os.readlink(f"/proc/{sandbox.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            assert time.monotonic() < deadline and sandbox.poll() is None
            time.sleep(0.01)
        os.write(net.fds[0], json.dumps({"child-pid": sandbox.pid}).encode())  # as bwrap's --info-fd says it
        held = os.dup(net.fds[1])  # the end of --block-fd bwrap would hold
        try:
            net.connect(sandbox)
        finally:
            os.close(held)
        assert net.proc is None, "slirp4netns started while the sandbox's loopback was still down"
    finally:
        sandbox.kill()
        sandbox.wait()
        net.close()


@needs_bwrap
def test_a_public_network_sandbox_reaches_the_hosts_network_address(tmp_path, host_http, no_leaked_slirp):
    """What a container reaches, the sandbox reaches: a server on the host's network address."""
    from termforge.evals.harbor_tasks import start_harbor_session

    address, port, _www = host_http
    built = build_harbor_image(load_harbor_task(_public_task(tmp_path / "tasks")), tmp_path / "images")
    assert built.ok, built.reason
    session = start_harbor_session(built.image)
    try:
        res = session.exec(f"python3 -c \"import urllib.request as u; "
                           f"print(u.urlopen('http://{address}:{port}/data.txt', timeout=20).read().decode())\"",
                           timeout=60)
    finally:
        session.stop()
    assert res.stdout.strip() == "fetched-by-add", res.stdout + res.stderr


@needs_bwrap
def test_a_dockerfile_run_step_with_build_network_cannot_reach_the_hosts_loopback(tmp_path, host_services,
                                                                                no_leaked_slirp):
    """A RUN step of a build given network (eval.tbench.build_network, the default) reaches neither
    the host's 127.0.0.1 nor its abstract sockets: the build's namespace is its own."""
    port, name = host_services
    task_dir = _public_task(tmp_path / "tasks", f"COPY tf-probe.py /tmp/tf-probe.py\n"
                            f"RUN python3 /tmp/tf-probe.py {port} {name} > /app/probe.txt; "
                            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' > /app/ifaces\n",
                            files={"tf-probe.py": PROBE})
    built = build_harbor_image(load_harbor_task(task_dir), tmp_path / "images")
    assert built.ok, built.reason
    layer = built.image.path / "layer"
    found = _probe_results((layer / "probe.txt").read_text())
    assert SECRET not in str(found), f"a RUN step reached a host-only service: {found}"
    assert all(v.startswith("unreached") for v in found.values()), found
    assert "tap0" in (layer / "ifaces").read_text().split(), "the build had no network of its own"


@needs_bwrap
def test_an_add_url_of_the_hosts_loopback_does_not_fetch(tmp_path, host_services, no_leaked_slirp):
    """ADD of a URL is fetched by buildah itself, in the build's namespace: the host's 127.0.0.1
    is not there either (the build fails; the host's service never answers it)."""
    port, _name = host_services
    task_dir = _public_task(tmp_path / "tasks", f"ADD http://127.0.0.1:{port}/secret /opt/secret\n")
    built = build_harbor_image(load_harbor_task(task_dir), tmp_path / "images")
    assert not built.ok and "connection refused" in built.reason, built.reason
    assert SECRET not in (built.reason or "") + (built.log or "")


def test_a_public_network_without_slirp4netns_is_one_line_naming_it(tmp_path, monkeypatch):
    """No slirp4netns: a sandbox that needs network is refused in one line naming the program,
    never given the host's network namespace instead."""
    from termforge.errors import TermforgeError
    from termforge.runtime import process
    from termforge.runtime.base import Limits
    from termforge.runtime.bwrap import run_sandboxed

    monkeypatch.setattr(process, "SLIRP4NETNS", "tf-absent-slirp4netns")
    with pytest.raises(TermforgeError) as info:
        run_sandboxed(["bwrap", "--ro-bind", "/", "/", "--", "true"], 10, Limits(), public_net=True)
    assert "tf-absent-slirp4netns is not installed" in str(info.value) and "\n" not in str(info.value)
