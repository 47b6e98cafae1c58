"""What `jax.distributed.initialize()` detects under SLURM, Open MPI, Kubernetes and on TPU VMs.

This machine has no scheduler, no GPU and no TPU. So this script does what each scheduler
does when it starts a job: it starts `startup_check.py` (beside it) once per process, with
the environment variables that scheduler sets, and each process prints what JAX made of
them. Two things stand in for what is missing. The coordinator listens on a free local
port (`JAX_COORDINATOR_PORT`, which JAX reads instead of the port it derives), on this
machine (`localhost` in place of the first node's name). And each process gets as many CPU
devices as the accelerators JAX would open on a real node: all of them, unless
`jax.distributed.initialize()` chose some GPUs (`jax_cuda_visible_devices`), then those.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% start
# --8<-- [start:start]
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

# startup_check.py lies next to this file (in a notebook: in the current folder).
TASK = Path(globals().get("__file__", "startup_check.py")).resolve().parent / "startup_check.py"

# What stands in for the accelerators of a node, run in each process before the task.
STAND_IN = """
import os, runpy, sys
import jax
from jax._src.clusters import cloud_tpu_cluster, cluster

initialize = jax.distributed.initialize

def initialize_then_open_accelerators(*args, **kwargs):
    initialize(*args, **kwargs)
    chosen = jax.config.read("jax_cuda_visible_devices")  # set from local_device_ids
    node = int(os.environ["ACCELERATORS_ON_NODE"])
    jax.config.update("jax_num_cpu_devices", node if chosen == "all" else len(chosen.split(",")))

jax.distributed.initialize = initialize_then_open_accelerators
if "TPU_WORKER_ID" in os.environ or "GCE_METADATA_IP" in os.environ:  # a TPU host:
    # there, JAX finds TPU chips when it is imported
    cloud_tpu_cluster.running_in_cloud_tpu_vm = cluster.running_in_cloud_tpu_vm = True
if "GCE_METADATA_IP" in os.environ:  # a TPU VM: JAX asks its metadata server, which it
    del os.environ["TPU_SKIP_MDS_QUERY"]  # skips where it found no TPU chip at import
runpy.run_path(sys.argv[1], run_name="__main__")
"""


def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


Job = list[tuple[dict[str, str], subprocess.Popen]]  # each process: its variables, itself


def start(processes: list[dict[str, str]], accelerators_on_node: int) -> Job:
    """Start one process per entry of `processes`, each with those variables added to this
    environment, as a scheduler starts the processes of a job; one coordinator port each job
    (`{port}` in a variable is replaced by it)."""
    port = free_port()
    shared = {
        "JAX_COORDINATOR_PORT": port,
        "JAX_PLATFORMS": "cpu",
        "ACCELERATORS_ON_NODE": str(accelerators_on_node),
    }
    job = []
    for variables in processes:
        variables = {name: value.format(port=port) for name, value in variables.items()}
        process = subprocess.Popen([sys.executable, "-c", STAND_IN, str(TASK)], text=True,
                                   env={**os.environ, **shared, **variables},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        job.append((variables, process))
    return job


def show(title: str, job: Job, shown: tuple[str, ...] = ()) -> None:
    """Print each process's line, or the warning and error it stopped with, in rank order,
    after the values of the variables named in `shown`."""
    print(title)
    for variables, process in job:
        out, err = process.communicate(timeout=120)
        given = " ".join(f"{name}={variables[name]}" for name in shown)
        for warning in re.findall(r"Warning: (.+?\.)\s", err, re.DOTALL):  # first sentence
            print("  warning:", " ".join(warning.split()))
        if process.returncode == 0:
            print(f"  {given}{' ' if given else ''}-> {out.strip()}")
        else:  # the last line of the traceback: the error
            print("  error:", err.strip().splitlines()[-1])


# --8<-- [end:start]


# %% slurm
# --8<-- [start:slurm]
def slurm(tasks_per_node: list[int], gpus_per_node: int, **extra: str) -> list[dict[str, str]]:
    """The variables SLURM sets in each task of a job step (`srun`), node after node."""
    local_ids = [local for tasks in tasks_per_node for local in range(tasks)]
    return [
        {
            "SLURM_JOB_ID": "4242",
            "SLURM_STEP_NODELIST": "localhost",  # gpu[017-018]: the first node coordinates
            "SLURM_STEP_NUM_NODES": str(len(tasks_per_node)),
            "SLURM_NTASKS": str(len(local_ids)),
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(local_id),  # the task's index on its node
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(gpus_per_node))),
            **extra,
        }
        for rank, local_id in enumerate(local_ids)
    ]


# --8<-- [end:slurm]

# %% jobs
# Every job starts now and runs alongside the others; each prints below, in turn.
# --8<-- [start:jobs]
EIGHT = "0,1,2,3,4,5,6,7"
jobs = {
    "slurm_per_node": start(slurm([1, 1], gpus_per_node=8), accelerators_on_node=8),
    "slurm_per_node_fixed": start(
        slurm([1, 1], gpus_per_node=8, JAX_LOCAL_DEVICE_IDS=EIGHT), accelerators_on_node=8
    ),
    "slurm_per_gpu": start(slurm([2], gpus_per_node=2), accelerators_on_node=2),
}
# --8<-- [end:jobs]

# %% salloc
# --8<-- [start:salloc]
# Inside `salloc --nodes=2 --ntasks-per-node=1`, before any srun: a job, but no job step.
salloc = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "localhost", "SLURM_NNODES": "2",
          "SLURM_NTASKS": "2", "CUDA_VISIBLE_DEVICES": EIGHT}  # fmt: skip
jobs["salloc"] = start([salloc], accelerators_on_node=8)
# --8<-- [end:salloc]


# %% ompi
# --8<-- [start:ompi]
def mpirun(ranks_per_node: list[int], version: str, **extra: str) -> list[dict[str, str]]:
    """The variables Open MPI's `mpirun` sets in each rank, node after node."""
    local_ranks = [local for ranks in ranks_per_node for local in range(ranks)]
    return [
        {
            "OMPI_VERSION": version,
            "OMPI_COMM_WORLD_SIZE": str(len(local_ranks)),
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank),
            # Open MPI 4's launcher (ORTE): its address, the first node's; Open MPI 5 has none.
            **(
                {"OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://127.0.0.1:34911"}
                if version.startswith("4.")
                else {}
            ),  # fmt: skip
            "CUDA_VISIBLE_DEVICES": EIGHT,
            **extra,
        }
        for rank, local_rank in enumerate(local_ranks)
    ]


jobs["ompi4_per_node"] = start(
    mpirun([1, 1], "4.1.6", JAX_LOCAL_DEVICE_IDS=EIGHT), accelerators_on_node=8
)
jobs["ompi5"] = start(mpirun([1], "5.0.5"), accelerators_on_node=8)
# --8<-- [end:ompi]

# %% kubernetes
# --8<-- [start:kubernetes]
pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
jobs["k8s_plain"] = start([pod], accelerators_on_node=8)
indexed_job = [
    {
        **pod,
        "JOB_COMPLETION_INDEX": str(index),  # set by Kubernetes in an indexed Job
        "NUM_PROCESSES": "2",  # from the manifest
        "JAX_COORDINATOR_ADDRESS": "localhost:{port}",  # the manifest: train-0.train:1234
    }
    for index in range(2)
]
jobs["k8s_indexed"] = start(indexed_job, accelerators_on_node=8)
# --8<-- [end:kubernetes]


# %% tpu
# --8<-- [start:tpu]
def tpu_slices(slices: int, hosts_per_slice: int) -> list[dict[str, str]]:
    """The variables of each host of a multi-slice TPU job (GKE; TPU VMs hold the same in
    their metadata): the slice's hosts, the host's index in its slice, and the slices."""
    return [
        {
            "TPU_WORKER_HOSTNAMES": ",".join(["localhost"] * hosts_per_slice),
            "TPU_WORKER_ID": str(host),
            "MEGASCALE_NUM_SLICES": str(slices),
            "MEGASCALE_SLICE_ID": str(index),
            "MEGASCALE_COORDINATOR_ADDRESS": "localhost",  # the first host of slice 0
        }
        for index in range(slices)
        for host in range(hosts_per_slice)
    ]


jobs["tpu_two_slices"] = start(tpu_slices(slices=2, hosts_per_slice=2), accelerators_on_node=4)
# --8<-- [end:tpu]

# %% tpu_vm
# --8<-- [start:tpu_vm]
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def metadata_server(attributes: dict[str, str]) -> str:
    """A TPU VM's metadata server, answering JAX's questions with `attributes`; its address."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):
            key = self.path.rsplit("/", 1)[-1]  # /computeMetadata/v1/instance/attributes/KEY
            found = key in attributes and self.headers["Metadata-Flavor"] == "Google"
            self.send_response(200 if found else 404)
            self.end_headers()
            self.wfile.write(attributes.get(key, "").encode())

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"127.0.0.1:{server.server_address[1]}"


# One slice of 2 hosts (v5p-16), each VM with its own metadata server.
tpu_vms = [
    {
        "GCE_METADATA_IP": metadata_server(
            {
                "agent-worker-number": str(host),  # this VM's index in the slice
                "worker-network-endpoints": "localhost,localhost",  # the slice's VMs
                "tpu-env": "ACCELERATOR_TYPE: 'v5p-16'",  # no MEGASCALE_*: one slice
            }
        ),
        "NO_PROXY": "127.0.0.1",
    }
    for host in range(2)
]
jobs["tpu_vm"] = start(tpu_vms, accelerators_on_node=4)
# --8<-- [end:tpu_vm]

# Every job runs alongside the others; each cell below waits for one and prints its lines,
# with the variables named that tell its processes apart.

# %% slurm_per_node
show(
    "SLURM, --nodes=2 --ntasks-per-node=1 --gpus-per-node=8",
    jobs["slurm_per_node"],
    ("SLURM_PROCID", "SLURM_LOCALID"),
)

# %% slurm_per_node_fixed
show(
    "the same, with JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7",
    jobs["slurm_per_node_fixed"],
    ("SLURM_PROCID", "SLURM_LOCALID"),
)

# %% slurm_per_gpu
show(
    "SLURM, --nodes=1 --ntasks-per-node=2 --gpus-per-node=2 (part of a node)",
    jobs["slurm_per_gpu"],
    ("SLURM_PROCID", "SLURM_LOCALID"),
)

# %% salloc_without_srun
show("SLURM, python startup_check.py in salloc's shell, without srun", jobs["salloc"])

# %% ompi4_per_node
show(
    "Open MPI 4, mpirun -np 2 --map-by ppr:1:node -x JAX_LOCAL_DEVICE_IDS",
    jobs["ompi4_per_node"],
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
)

# %% ompi5
show("Open MPI 5, mpirun -np 1, without mpi4py", jobs["ompi5"])

# %% k8s_plain
show("Kubernetes, a pod that is not part of an indexed Job", jobs["k8s_plain"])

# %% k8s_indexed
show("Kubernetes, an indexed Job of 2 pods", jobs["k8s_indexed"], ("JOB_COMPLETION_INDEX",))

# %% tpu_two_slices
show(
    "TPU on GKE, 2 slices of 2 hosts, 4 chips each (v5p-16)",
    jobs["tpu_two_slices"],
    ("MEGASCALE_SLICE_ID", "TPU_WORKER_ID"),
)

# %% tpu_vms
show("TPU VMs, gcloud compute tpus tpu-vm ssh --worker=all: 1 slice of 2 hosts", jobs["tpu_vm"])
