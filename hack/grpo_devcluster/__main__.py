"""grpo-devcluster: build, start, stop and inspect the local control plane.

  grpo-devcluster build [NAME..]   build every component, or the named ones (cached under ~/.cache/grpo-devcluster)
  grpo-devcluster images [NAME..]  build the operator and trainer images with buildah from their Dockerfiles
                                   (cached); with a running real node, import them into it
                                   (NAME: operator, trainer = its rehearsal variant, trainer-full);
                                   --push REGISTRY: push them there (default: operator trainer-full)
  grpo-devcluster start            start on 127.0.0.1; prints the KUBECONFIG to use
                                   (--real-node: also the real node beside the KWOK nodes; needs root;
                                   --cloud: the cloud-like profile, see cloud_profile.py)
  grpo-devcluster stop             stop everything started from GRPO_DEVCLUSTER_DIR
  grpo-devcluster status           which components run
  grpo-devcluster diagnose         why tests may have failed: dead components, pods that are not Running or
                                   Succeeded (and why), the last warning events, the ends of the telling logs
  grpo-devcluster env              `export KUBECONFIG=…; export PATH=…` for a shell
"""

from __future__ import annotations

import argparse
import sys
import time

from . import build, diagnose, images, processes
from .cluster import LocalCluster, Ports, default_workdir
from .components import ALL
from .errors import DevClusterError
from .kubeapi import ApiError


def _pods_and_events(cluster: LocalCluster) -> tuple[list[dict] | None, list[dict] | None]:
    try:
        return cluster.api.items("pods"), cluster.api.items("events")
    except (OSError, ApiError):
        return None, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpo-devcluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "images", "start", "stop", "status", "diagnose", "env"])
    parser.add_argument("names", nargs="*", help="build: which components (default: all); "
                        "images: which images (default: operator trainer)")
    parser.add_argument("--real-node", action="store_true", help="start: with the real node (containerd + kubelet)")
    parser.add_argument("--cloud", action="store_true",
                        help="start: the cloud-like profile (zones, GFD labels, tainted GPU nodes, zonal "
                        "WaitForFirstConsumer storage; hack/grpo_devcluster/cloud_profile.py)")
    parser.add_argument("--dir", default=None, help=f"working directory (default {default_workdir()})")
    parser.add_argument("--ray-job-seconds", type=float, default=5.0,
                        help="how long simulated Ray jobs report RUNNING before they succeed")
    parser.add_argument("--build-only", action="store_true",
                        help="images: build them, import them into no running cluster's node")
    parser.add_argument("--push", metavar="REGISTRY", default=None,
                        help="images: push them to REGISTRY (e.g. registry.example.com/team) as grpo-operator, "
                        "grpo-trainer (trainer-full) and grpo-trainer-rehearsal, tagged with the chart's appVersion")
    parser.add_argument("--tls-verify", choices=["true", "false"], default="true",
                        help="images --push: verify the registry's certificate (false only for a local registry)")
    parser.add_argument("--free-ports", action="store_true",
                        help="start: on ports the kernel says are free (default: fixed ports, see Ports)")
    args = parser.parse_intermixed_args(argv)  # options may come after the names: images NAME --push R
    try:
        if args.command == "build":
            started = time.monotonic()
            by_name = {c.name: c for c in ALL}
            unknown = sorted(set(args.names) - set(by_name))
            if unknown:
                print(f"grpo-devcluster: unknown component {unknown}; choose from {sorted(by_name)}", file=sys.stderr)
                return 2
            built = build.build_all(tuple(by_name[n] for n in args.names) if args.names else ALL)
            for name, path in built.items():
                print(f"{name}: {path}")
            print(f"all built in {time.monotonic() - started:.0f}s")
        elif args.command == "images" and args.push:
            return push_images(args.names or ["operator", "trainer-full"], args.push, args.tls_verify == "true")
        elif args.command == "images":
            return build_images(args.names or ["operator", "trainer"], args.dir, args.build_only)
        elif args.command == "start":
            ports = Ports.free() if args.free_ports else None
            LocalCluster(args.dir, ports, ray_job_running_seconds=args.ray_job_seconds,
                         real_node=args.real_node, cloud=args.cloud).start()
        elif args.command == "stop":
            cluster = LocalCluster.attach(args.dir)
            ports = list(cluster.ports.owners())
            cluster.stop()
            still = [p for p in ports if processes.is_listening(p)]
            if still:
                print(f"warning: ports still listening after stop: {still}", file=sys.stderr)
                return 1
            print("stopped")
        elif args.command == "status":
            cluster = LocalCluster.attach(args.dir)
            for name, up in cluster.running().items():
                print(f"{name:28s} {'running' if up else 'DEAD'}")
            print(f"KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "diagnose":
            cluster = LocalCluster.attach(args.dir)
            for line in diagnose.diagnosis(cluster.running(), cluster.log_dir, *_pods_and_events(cluster)):
                print(line)
        elif args.command == "env":
            cluster = LocalCluster.attach(args.dir)
            for key, value in cluster.env().items():
                print(f"export {key}={value}")
    except DevClusterError as exc:
        print(f"grpo-devcluster: {exc}", file=sys.stderr)
        return 1
    return 0


def push_images(names: list[str], registry: str, tls_verify: bool) -> int:
    unknown = sorted(set(names) - set(images.RECIPES))
    if unknown:
        print(f"grpo-devcluster: unknown image {unknown}; choose from {sorted(images.RECIPES)}", file=sys.stderr)
        return 2
    done = images.push_images(names, registry, tls_verify)
    for push in done:
        print(f"{push.name}: {push.target}")
    values = images.helm_values(done)
    if values:
        print("helm install grpo charts/grpo-operator " + " ".join(f"--set {v}" for v in values))
    return 0


def build_images(names: list[str], workdir: str | None, build_only: bool = False) -> int:
    unknown = sorted(set(names) - set(images.RECIPES))
    if unknown:
        print(f"grpo-devcluster: unknown image {unknown}; choose from {sorted(images.RECIPES)}", file=sys.stderr)
        return 2
    started = time.monotonic()
    built = images.build_node_images(names)
    for name, image in built.items():
        took = f"built in {image.seconds:.0f}s" if image.seconds else "cached"
        print(f"{name}: {image.reference} ({image.size}, {took})")
    try:
        cluster = None if build_only else LocalCluster.attach(workdir)
    except DevClusterError:
        cluster = None
    if cluster is not None and cluster.real_node:
        cluster.attach_node()
        cluster.load_node_images(tuple(names))
        print(f"imported into the real node of {cluster.workdir}")
    print(f"done in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
