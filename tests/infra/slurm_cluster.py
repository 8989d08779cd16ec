"""A real single-node SLURM cluster (munged + slurmctld + slurmd) started on this machine for tests.

Needs root and Debian's packages: `apt-get install -y slurm-wlm munge` (Slurm 22.05). Without them
(or without root) the `slurm_cluster` fixture skips with the reason from `slurm_available()`.

Use the session fixture from a test module:

    from tests.infra.slurm_cluster import slurm_cluster  # noqa: F401

    def test_something(slurm_cluster):
        subprocess.run(["sbatch", "--wrap", "hostname"], env=slurm_cluster.client_env(), ...)

While the fixture is active, `SLURM_CONF` is also set in `os.environ`, so in-process clients
(submitit, Hydra's submitit launcher) find the cluster. It is idle about 1 s after the start.

The cluster: one node (this host, NodeAddr 127.0.0.1, all its CPUs, MemTotal less 1 GiB) in one
partition `debug`; cores and memory are consumable (CR_Core_Memory, DefMemPerCPU = memory/CPUs,
so a job asking for more CPUs than the node has pends forever with Reason=PartitionConfig);
KillWait=5 s (SIGTERM to SIGKILL on scancel and on the time limit); no accounting, so `sacct`
fails: submitit warns on each poll and only sees a job end through its result pickle. Ports are
fresh free ones on every start; daemons of an earlier run whose owner process is gone (found by
a marker in their environment) are killed first. munged is reused when it answers, otherwise
started as the munge user, and left running (a system service; starting one while an old one
is still exiting fails).

By hand:

    python -m tests.infra.slurm_cluster /tmp/slurm   # start, print SLURM_CONF, Ctrl-C to stop
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

PARTITION = "debug"
MARKER_ENV = "DISTBENCH_TEST_SLURM"  # set in our daemons' environment: how stale ones are found
REQUIRED_BINARIES = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo")
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN_DIR = Path("/run/munge")
DAEMONS = ("slurmctld", "slurmscriptd", "slurmd", "slurmstepd")
MEMORY_MARGIN_MB = 1024  # RealMemory below what slurmd sees, else the node is drained as INVALID
START_TIMEOUT_S = 30.0
FINISHED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
KILL_WAIT_S = 5  # SIGTERM -> SIGKILL on cancel and on time limit (Slurm's default is 30)


def slurm_available() -> str | None:
    """None when a cluster can be started here, else the reason to skip."""
    missing = [name for name in REQUIRED_BINARIES if shutil.which(name) is None]
    if missing:
        return f"no SLURM ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "starting slurmctld/slurmd/munged needs root"
    return None


def short_hostname() -> str:
    """The name slurmd and slurmctld know themselves by (the hostname up to the first dot)."""
    return socket.gethostname().split(".")[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free right now (all bound at once, then released)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def real_memory_mb(margin_mb: int = MEMORY_MARGIN_MB) -> int:
    """MemTotal from /proc/meminfo in MB, less a margin (at least 1/2 of it is kept)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total_mb = int(line.split()[1]) // 1024
            return max(total_mb - margin_mb, total_mb // 2)
    raise RuntimeError("no MemTotal in /proc/meminfo")


def conf_text(directory: Path, ctld_port: int, slurmd_port: int) -> str:
    host = short_hostname()
    cpus = os.cpu_count() or 1
    memory = real_memory_mb()
    return f"""\
# written by tests/infra/slurm_cluster.py: a one-node test cluster
ClusterName=distbench-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
SlurmctldLogFile={directory}/log/slurmctld.log
SlurmdLogFile={directory}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={memory // cpus}
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
InactiveLimit=30
KillWait={KILL_WAIT_S}
MinJobAge=300
SlurmdTimeout=60
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def write_slurm_conf(
    directory: Path, ctld_port: int | None = None, slurmd_port: int | None = None
) -> Path:
    """Write `directory`/slurm.conf (state, spool and log dirs under `directory`); return its path.

    Ports default to free ones, so a second cluster never collides with a stale first one.
    """
    directory = Path(directory).resolve()
    for sub in ("state", "spool", "log"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    free_ctld, free_slurmd = free_ports(2)
    conf = directory / "slurm.conf"
    conf.write_text(conf_text(directory, ctld_port or free_ctld, slurmd_port or free_slurmd))
    return conf


# munged -------------------------------------------------------------------------------------


def munge_answers() -> bool:
    """True when a munged is up and issues credentials."""
    done = subprocess.run(["munge", "-n"], capture_output=True, check=False)
    return done.returncode == 0


def munged_processes() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["name"]) if p.info["name"] == "munged"]


def ensure_munge_key() -> None:
    if MUNGE_KEY.exists():
        return
    subprocess.run(["mungekey", "--create", f"--keyfile={MUNGE_KEY}"], check=True)
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o600)


def ensure_munged(timeout_s: float = 15.0) -> None:
    """Reuse a munged that answers; else wait out one that is exiting and start our own."""
    if munge_answers():
        return
    deadline = time.monotonic() + timeout_s
    while munged_processes() and time.monotonic() < deadline:  # an old one, exiting or starting
        if munge_answers():
            return
        time.sleep(0.2)
    ensure_munge_key()
    MUNGE_RUN_DIR.mkdir(parents=True, exist_ok=True)
    shutil.chown(MUNGE_RUN_DIR, "munge", "munge")
    # munged forks into the background once its socket is ready; --force: a stale socket left by
    # a killed munged does not stop it
    subprocess.run(
        ["munged", "--force"], user="munge", group="munge", extra_groups=[], check=True, timeout=30
    )
    while not munge_answers():
        if time.monotonic() > deadline:
            raise RuntimeError("munged started but `munge -n` still fails")
        time.sleep(0.2)


# slurmctld / slurmd -------------------------------------------------------------------------


def marker_of(proc: psutil.Process) -> str | None:
    """The MARKER_ENV value ("<owner pid>:<cluster dir>") of a daemon we started, else None."""
    if proc.info["name"] not in DAEMONS:
        return None
    try:
        return proc.environ().get(MARKER_ENV)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def marked_daemons(directory: Path | None = None) -> list[psutil.Process]:
    """Our slurmctld/slurmd/slurmstepd processes: all of them, or those of one cluster dir."""
    found = []
    for proc in psutil.process_iter(["name"]):
        marker = marker_of(proc)
        if marker and (directory is None or marker.partition(":")[2] == str(directory)):
            found.append(proc)
    return found


def owner_alive(marker: str, daemon: psutil.Process) -> bool:
    """Whether the process that started `daemon` (the marker's "<pid>:") still runs."""
    owner_pid, _, _ = marker.partition(":")
    if not owner_pid.isdigit():
        return False
    if int(owner_pid) == os.getpid():
        return True
    try:
        owner = psutil.Process(int(owner_pid))
        # a zombie owner is dead (a container's pid 1 may never reap it); a younger one is a reuse
        return (
            owner.status() != psutil.STATUS_ZOMBIE and owner.create_time() <= daemon.create_time()
        )
    except psutil.Error:
        return False


def stale_daemons() -> list[psutil.Process]:
    """Our daemons whose owner (the test process that started them) is gone."""
    return [proc for proc in marked_daemons() if not owner_alive(marker_of(proc) or "", proc)]


def with_descendants(procs: list[psutil.Process]) -> list[psutil.Process]:
    """`procs` and their children (a slurmstepd's job tasks), each once."""
    found = {proc.pid: proc for proc in procs}
    for proc in procs:
        with suppress(psutil.Error):
            found.update({child.pid: child for child in proc.children(recursive=True)})
    return list(found.values())


def stop_processes(procs: list[psutil.Process], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL what is still alive after `timeout_s`."""
    for proc in procs:
        with suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        with suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


def stop_popen(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def kill_stale_daemons() -> int:
    """Stop daemons a previous run left behind; return how many there were."""
    stale = stale_daemons()
    stop_processes(with_descendants(stale))
    return len(stale)


def log_tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return f"(no {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class SlurmCluster:
    """A running one-node cluster: its directory, conf, daemons and the client environment."""

    directory: Path
    conf: Path
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """What clients (sbatch, squeue, submitit) need on top of os.environ."""
        return {"SLURM_CONF": str(self.conf)}

    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """Run a SLURM client command against this cluster; return its stdout."""
        done = subprocess.run(
            list(args),
            env=self.client_env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} log tail ---\n{log_tail(self.directory / 'log' / f'{name}.log')}"
            for name in ("slurmctld", "slurmd")
        )

    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-o", "%T", check=False).strip()

    def sbatch(self, *args: str) -> str:
        """Submit a batch job (`sbatch --parsable ARGS`); return its job id."""
        return self.run("sbatch", "--parsable", *args).strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        """JobState from `scontrol show job` (jobs stay visible MinJobAge=300 s after the end)."""
        out = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
        return fields.get("JobState", "UNKNOWN")

    def wait_for_state(self, job_id: str, states: set[str], timeout_s: float = 30) -> str:
        """Poll until the job is in one of `states`; return it (RuntimeError on timeout)."""
        deadline = time.monotonic() + timeout_s
        while (state := self.job_state(job_id)) not in states:
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id} still {state} after {timeout_s} s\n{self.logs()}")
            time.sleep(0.2)
        return state

    def wait_until_finished(self, job_id: str, timeout_s: float = 30) -> str:
        return self.wait_for_state(job_id, FINISHED_STATES, timeout_s)


def start_daemon(name: str, conf: Path, extra: list[str]) -> subprocess.Popen:
    """`name -D -f conf` in the background, marked for `kill_stale_daemons`."""
    log = conf.parent / "log" / f"{name}.out"
    env = {**os.environ, "SLURM_CONF": str(conf), MARKER_ENV: f"{os.getpid()}:{conf.parent}"}
    with log.open("ab") as out:
        return subprocess.Popen(
            [name, "-D", "-f", str(conf), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def wait_until_idle(cluster: SlurmCluster, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        for name, proc in cluster.daemons.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}\n{cluster.logs()}")
        state = cluster.node_state()
        if state == "idle":
            return
        time.sleep(0.2)
    raise RuntimeError(f"node not idle after {timeout_s:.0f} s (sinfo {state!r})\n{cluster.logs()}")


def start_cluster(directory: Path, timeout_s: float = START_TIMEOUT_S) -> SlurmCluster:
    """Write the conf into `directory`, start munged (if needed), slurmctld, slurmd; wait idle."""
    reason = slurm_available()
    if reason:
        raise RuntimeError(reason)
    kill_stale_daemons()
    ensure_munged()
    cluster = SlurmCluster(directory=Path(directory).resolve(), conf=write_slurm_conf(directory))
    try:
        cluster.daemons["slurmctld"] = start_daemon("slurmctld", cluster.conf, ["-i"])
        cluster.daemons["slurmd"] = start_daemon("slurmd", cluster.conf, ["-N", short_hostname()])
        wait_until_idle(cluster, timeout_s)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def cancel_all_jobs(cluster: SlurmCluster, timeout_s: float = KILL_WAIT_S + 10) -> None:
    """scancel everything in the partition and wait until squeue is empty (steps reaped)."""
    if cluster.daemons.get("slurmctld") is None or cluster.daemons["slurmctld"].poll() is not None:
        return
    cluster.run("scancel", f"--partition={PARTITION}", check=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not cluster.run("squeue", "-h", "-o", "%i", check=False).strip():
            return
        time.sleep(0.5)


def stop_cluster(cluster: SlurmCluster) -> None:
    """Cancel all jobs, stop slurmd then slurmctld (and any slurmstepd left), remove state."""
    try:
        cancel_all_jobs(cluster)
    finally:
        for name in ("slurmd", "slurmctld"):
            proc = cluster.daemons.pop(name, None)
            if proc is not None:
                stop_popen(proc)
        # slurmstepds (and their tasks) that outlived scancel
        stop_processes(with_descendants(marked_daemons(cluster.directory)))
        for sub in ("state", "spool"):
            shutil.rmtree(cluster.directory / sub, ignore_errors=True)


@contextmanager
def running_slurm_cluster(directory: Path) -> Iterator[SlurmCluster]:
    """A started cluster for the `with` block; SLURM_CONF is set in os.environ meanwhile."""
    cluster = start_cluster(directory)
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        stop_cluster(cluster)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
    """One real SLURM cluster for the session (skips with the reason where it cannot run)."""
    reason = slurm_available()
    if reason:
        pytest.skip(reason)
    with running_slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def exit_on_signal(signum: int, frame: object) -> None:
    sys.exit(128 + signum)  # unwinds the `with`: the cluster is stopped


def main() -> None:
    directory = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/distbench-slurm")
    for signum in (signal.SIGINT, signal.SIGTERM):  # a background `&` job ignores SIGINT otherwise
        signal.signal(signum, exit_on_signal)
    started = time.monotonic()
    with running_slurm_cluster(directory) as cluster:
        print(f"idle after {time.monotonic() - started:.1f} s; export SLURM_CONF={cluster.conf}")
        sys.stdout.flush()
        while True:
            signal.pause()


if __name__ == "__main__":
    main()
