"""`planner profile-links`: measure the links between the ranks of a torchrun job (needs torch)
and write the link fragment that `plan` and `evaluate` take with `--links` (formats.md section 6)."""

from __future__ import annotations

import click

from ..calibrate.linkprof import LinkProfileOptions, parse_node_groups, parse_sizes
from ..core.io import yaml_text
from ..core.outfile import check_output


@click.command("profile-links")
@click.option("-o", "--output", type=str, default=None, help="Write the fragment (YAML) to FILE [default: stdout].")
@click.option("--sizes", default=None,
              help="Message sizes: MIN:MAX[:FACTOR] (default factor 2) or a list 4K,1M,... "
                   "[default: 4K:256M:4 on GPUs, 4K:4M:4 with gloo].")
@click.option("--iters", type=click.IntRange(1, 10_000), default=20, show_default=True,
              help="Timed runs per size; the median is kept.")
@click.option("--warmup", type=click.IntRange(0, 10_000), default=5, show_default=True, help="Untimed runs first.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: nccl when torch sees a GPU, else gloo.")
@click.option("--node-groups", default=None, envvar="PLANNER_NODE_GROUPS", metavar="NAME:NODES,...",
              help="Name the nodes in node order (the cluster file's groups): then the fragment holds "
                   "node_groups and links between groups [env PLANNER_NODE_GROUPS].")
@click.option("--ranks-per-node", type=click.IntRange(1, 1024), default=None, envvar="PLANNER_RANKS_PER_NODE",
              help="Split the ranks into nodes of this many (for a test on one machine) instead of "
                   "torchrun's nodes [env PLANNER_RANKS_PER_NODE].")
def profile_links_command(output, sizes, iters, warmup, backend, node_groups, ranks_per_node) -> None:
    """Measure collective bandwidth and latency against message size between the ranks (run under torchrun).

    All-reduce, all-gather, reduce-scatter, all-to-all and send/recv, inside a node and between
    nodes (and groups); rank 0 writes a link fragment for `plan` / `evaluate --links FILE`.

    \b
    Examples:
      torchrun --nproc-per-node 8 -m planner.cli profile-links -o links.yaml
      torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
          -m planner.cli profile-links --node-groups a100:1,h100:1 -o links.yaml
      torchrun --nproc-per-node 4 -m planner.cli profile-links --backend gloo --ranks-per-node 2 \\
          --sizes 4K:256K:4 --iters 5 -o cpu-links.yaml
    """
    from ..calibrate.linkprof import profile_links
    from ..core.outfile import write_output

    options = LinkProfileOptions(sizes=parse_sizes(sizes), iters=iters, warmup=warmup, backend=backend,
                                 ranks_per_node=ranks_per_node, node_groups=parse_node_groups(node_groups))
    if output:
        check_output(output)
    fragment = profile_links(options)
    if fragment is None:  # not rank 0
        return
    text = yaml_text(fragment, sort_keys=False, width=120, default_flow_style=None)
    if not output:
        click.echo(text, nl=False)
        return
    write_output(output, text)
    for where, link in _links(fragment):
        ar = link["curve"]["all_reduce"]
        click.echo(f"{where}: all-reduce {ar['ranks']} ranks: bus {link['bandwidth_GBps']:g} GB/s, latency "
                      f"{link['latency_us']:g} us per step; busbw {ar['busbw_GBps'][0]:g} GB/s at "
                      f"{ar['size_bytes'][0]} B .. {ar['busbw_GBps'][-1]:g} GB/s at {ar['size_bytes'][-1]} B")
    click.echo(f"link fragment written to {output}")


def _links(fragment: dict):
    for key in ("intra_node", "inter_node"):
        if key in fragment:
            yield key, fragment[key]
    for name, entry in (fragment.get("node_groups") or {}).items():
        for key, link in entry.items():
            yield f"node_groups.{name}.{key}", link
    for entry in fragment.get("links") or []:
        yield f"links {entry['between'][0]}-{entry['between'][1]}", entry
