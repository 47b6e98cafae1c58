"""The claims of "Launching on a cluster", read from schedulers.out (which the snippet test
records again by starting startup_check.py with each scheduler's variables) and from the
JAX code that reads those variables."""

from __future__ import annotations

import re

import pytest
import yaml
from jax._src.clusters import SlurmCluster, cloud_tpu_cluster
from sitetools import REPO
from sitetools.snippets import read_sections

OUT = read_sections((REPO / "snippets/cluster/schedulers.out").read_text(encoding="utf-8"))
PAGE = (REPO / "docs/en/cluster/launching.md").read_text(encoding="utf-8")
LINE = re.compile(
    r"-> process (\d) of (\d), cpu: (\d+) local devices, (\d+) in all(?:, GPUs (\S+))?$",
    re.MULTILINE,
)


def processes(job: str) -> list[tuple[int, int, int, int, str | None]]:
    """(rank, processes, local devices, devices in all, GPUs chosen or None) per process."""
    return [
        (int(rank), int(count), int(local), int(total), gpus or None)
        for rank, count, local, total, gpus in LINE.findall(OUT[job])
    ]


def test_one_task_per_node_under_slurm_uses_gpu_0_only_unless_told_otherwise():
    """Review N1: nothing fails, and 7 of 8 GPUs of each node sit idle."""
    assert processes("slurm_per_node") == [(0, 2, 1, 2, "0"), (1, 2, 1, 2, "0")]
    eight = "0,1,2,3,4,5,6,7"
    assert processes("slurm_per_node_fixed") == [(0, 2, 8, 16, eight), (1, 2, 8, 16, eight)]
    assert processes("slurm_per_gpu") == [(0, 2, 1, 2, "0"), (1, 2, 1, 2, "1")]
    assert processes("ompi4_per_node") == [(0, 2, 8, 16, eight), (1, 2, 8, 16, eight)]


def test_kubernetes_and_tpu_processes_get_every_device_of_their_node():
    assert processes("k8s_indexed") == [(0, 2, 8, 16, None), (1, 2, 8, 16, None)]
    # TPU VMs: each VM's index in the slice from its metadata server
    assert processes("tpu_vms") == [(0, 2, 4, 8, None), (1, 2, 4, 8, None)]
    # rank = the host's index in its slice + the slice's index x 2 hosts per slice
    slices = re.findall(r"MEGASCALE_SLICE_ID=(\d) TPU_WORKER_ID=(\d)", OUT["tpu_two_slices"])
    ranks = [rank for rank, *_ in processes("tpu_two_slices")]
    assert ranks == [int(host) + 2 * int(index) for index, host in slices] == [0, 1, 2, 3]
    assert {(local, total, gpus) for _, _, local, total, gpus in processes("tpu_two_slices")} == {
        (4, 16, None)
    }


@pytest.mark.parametrize(
    ("job", "error"),
    [
        ("salloc_without_srun", "ValueError: coordinator_address should be defined."),
        ("ompi5", "RuntimeError: Open MPI 5 or newer requires mpi4py"),
        ("k8s_plain", "ValueError: coordinator_address should be defined."),
    ],
)
def test_where_jax_finds_no_settings_it_stops_with_an_error(job: str, error: str):
    assert f"error: {error}" in OUT[job]
    assert f"schedulers.out:{job}" in PAGE


def test_without_the_kubernetes_package_jax_warns_first():
    assert (
        "warning: Kubernetes environment detected, but the `kubernetes` package" in OUT["k8s_plain"]
    )


def test_the_task_scripts_own_recording_is_one_of_the_lines_the_recreation_shows():
    task = (REPO / "snippets/cluster/startup_check.out").read_text(encoding="utf-8").strip()
    assert f"-> {task}" in OUT["slurm_per_node"]


def test_the_page_shows_every_recorded_job():
    for job in OUT:
        assert f"schedulers.out:{job}" in PAGE, job


def test_the_ports_on_the_page_are_those_jax_derives(monkeypatch):
    """SLURM: 61440 + the job id modulo 4096; TPU: 8482."""
    for name, value in {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "gpu[017-018]"}.items():
        monkeypatch.setenv(name, value)
    address = SlurmCluster.get_coordinator_address(None, None)
    assert address == f"gpu017:{61440 + 4242 % 4096}"
    assert "61440 + the job id modulo 4096" in PAGE
    assert cloud_tpu_cluster.coordinator_port == "8482"
    assert re.search(r"on port\s+8482", PAGE)


def code_block(title: str) -> str:
    return re.search(rf'```\w+ title="{re.escape(title)}"\n(.*?)```', PAGE, re.DOTALL)[1]


def test_the_batch_script_gives_its_one_task_per_node_every_gpu_it_asks_for():
    script = code_block("train.sbatch")
    assert "#SBATCH --ntasks-per-node=1" in script
    gpus = int(re.search(r"--gpus-per-node=(\d+)", script)[1])
    ids = re.search(r"export JAX_LOCAL_DEVICE_IDS=(\S+)", script)[1]
    assert ids == ",".join(map(str, range(gpus)))
    assert "srun python train.py" in script


def test_the_manifest_gives_startup_check_py_what_it_reads():
    service, job = yaml.safe_load_all(code_block("train.yaml"))
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"  # JOB_COMPLETION_INDEX
    assert spec["completions"] == spec["parallelism"]
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    env = {item["name"]: item["value"] for item in pod["containers"][0]["env"]}
    assert int(env["NUM_PROCESSES"]) == spec["parallelism"]
    host, port = env["JAX_COORDINATOR_ADDRESS"].split(":")
    assert host == f"{job['metadata']['name']}-0.{pod['subdomain']}" and port.isdigit()
    task = (REPO / "snippets/cluster/startup_check.py").read_text(encoding="utf-8")
    assert 'os.environ["NUM_PROCESSES"]' in task and 'os.environ["JOB_COMPLETION_INDEX"]' in task
