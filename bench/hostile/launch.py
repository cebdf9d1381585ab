"""Launch fields: what becomes an sbatch script, a hostfile, an ssh target or a pod spec."""

from __future__ import annotations

from bench.hostile.cases import Case


def launch_cases() -> list[Case]:
    from infra.launchers import DeepSpeedLaunch, SlurmLaunch
    from infra.launchers.kubernetes import KubernetesLaunch

    image = "ghcr.io/org/posttrain:1.0"
    cases = [
        ("Slurm partition with a line break", lambda: SlurmLaunch(partition="gpu\ntouch pwned"), "partition"),
        ("Slurm account with a ;", lambda: SlurmLaunch(account="lab;touch pwned"), "account"),
        ("sbatch option with a carriage return", lambda: SlurmLaunch(sbatch_options=["--qos=x\rtouch pwned"]),
         "sbatch option"),
        ("Slurm time limit as shell", lambda: SlurmLaunch(time_limit="1:00 $(touch pwned)"), "time_limit"),
        ("DeepSpeed host as an ssh option", lambda: DeepSpeedLaunch(hosts=[{"name": "-oProxyCommand=touch pwned"}]),
         "hosts.0.name"),
        ("DeepSpeed host with a trailing line break", lambda: DeepSpeedLaunch(hosts=[{"name": "gpu1\n"}]),
         "hosts.0.name"),
        ("DeepSpeed master_addr with a space", lambda: DeepSpeedLaunch(master_addr="a b;c"), "master_addr"),
        ("a variable's name with a line break", lambda: DeepSpeedLaunch(environment={"A\nB": "1"}), "environment"),
        ("Kubernetes image with a line break", lambda: KubernetesLaunch(image="img:1\nrm -rf /"), "image"),
        ("Kubernetes service account ../admin", lambda: KubernetesLaunch(image=image, service_account="../admin"),
         "service_account"),
        ("Kubernetes node selector key with a space", lambda: KubernetesLaunch(image=image,
                                                                               node_selector={"gpu type": "h100"}),
         "node_selector"),
        ("Kubernetes master_port 22", lambda: KubernetesLaunch(image=image, master_port=22), "master_port"),
    ]
    return [Case("launch fields", what, attempt, names) for what, attempt, names in cases]
