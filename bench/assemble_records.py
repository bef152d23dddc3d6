"""A record of many seed-runs assembled from a trained one, for timing readers at a size that
would take hours to train here.

    python bench/assemble_records.py TRAINED_RUN OUT --copies 10

The trained run's N seeds (seeds 1..N of the teaching plan) are written ``copies`` times under
new seeds: copy c holds seed s as seed c*N + s, so OUT is a run of the teaching plan on seeds
1..copies*N. Each seed's rows, digests and checkpoint files are the trained seed's, byte for
byte; what changes is only its number (the chunk's ``seed`` column and the checkpoint file
names its entry holds). The rest is recomputed, not copied: the plan (frozen for the new seed
list), the chunks' sha256 and sizes in the manifest, ``summary.json`` (the trained summary's
entries with their seed renumbered, which is the summary of the rows), and both fingerprints.
So every reader reads it as a run, and ``verify --quick`` passes it; a full ``verify`` does
not, and must not: a copy's rows are those its trained seed drew, which its new seed would
not draw again when its checkpoints are re-evaluated.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def assemble(trained: Path, out: Path, copies: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from postlab.jsonio import dump_json, parse_json
    from postlab.plan.frozen import freeze, load_plan
    from postlab.records.chunk_codec import FORMAT, FORMAT_KEY
    from postlab.records.chunks import chunk_entry, chunk_name, read_chunk
    from postlab.records.fingerprint import (
        FINGERPRINT_FILE,
        fingerprint_file_bytes,
        results_fingerprint,
        run_fingerprint,
        seed_results_sha256,
    )
    from postlab.records.record import load_record, summary_bytes

    record = load_record(trained / "record.json")
    seeds = record.seed_order()
    size = len(seeds)
    if sorted(seeds) != list(range(1, size + 1)):
        raise SystemExit(f"{trained}: expected a run of seeds 1..{size}")
    out.mkdir(parents=True)
    (out / "rows").mkdir()
    plan = load_plan(trained / "plan.json").data
    freeze(out / "plan.json", plan | {"seeds": list(range(1, copies * size + 1))})
    new_plan = load_plan(out / "plan.json")

    header = dict(record.data())
    header["plan_sha256"] = new_plan.sha256
    header["chunks"], header["seeds"] = [], []
    results: list[tuple[int, str]] = []
    named: set[str] = set()
    index = 0
    for copy in range(copies):
        shift = copy * size
        for chunk in record.chunks or []:
            table = read_chunk(trained, chunk).read()
            renumbered = [seed + shift for seed in table.column("seed").to_pylist()]
            table = table.set_column(table.schema.get_field_index("seed"), "seed",
                                     pa.array(renumbered, pa.int64()))
            checkpoints = []
            for seed, entries in zip(renumbered, table.column("checkpoints").to_pylist(),
                                     strict=True):
                for entry in entries:
                    name = f"seed-{seed}-{entry['stage']}.pt"
                    shutil.copyfile(trained / entry["file"], out / name)
                    named.add(name)
                    entry["file"] = name
                checkpoints.append(entries)
            table = table.set_column(table.schema.get_field_index("checkpoints"),
                                     "checkpoints", pa.array(checkpoints,
                                                             table.schema.field(
                                                                 "checkpoints").type))
            sink = pa.BufferOutputStream()
            schema = table.schema.with_metadata({FORMAT_KEY: FORMAT})
            with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
                for row in range(table.num_rows):  # a row group per seed, as postlab writes
                    writer.write_table(table.slice(row, 1).cast(schema))
            data = sink.getvalue().to_pybytes()
            name = chunk_name(index)
            index += 1
            (out / name).write_bytes(data)
            header["chunks"].append(chunk_entry(name, data, renumbered))
            for seed, digests in zip(renumbered, table.column("digests").to_pylist(),
                                     strict=True):
                results.append((seed, seed_results_sha256(seed, parse_json(digests,
                                                                            "digests"))))
    # the record's order is the trained one's (a chunk holds the seeds one worker trained)
    header["seeds"] = [seed + copy * size for copy in range(copies) for seed in seeds]
    order = {seed: place for place, seed in enumerate(header["seeds"])}
    results.sort(key=lambda item: order[item[0]])
    (out / "record.json").write_bytes(dump_json(header))

    summary = parse_json((trained / "summary.json").read_bytes(), "summary")
    (out / "summary.json").write_bytes(summary_bytes(
        [entry | {"seed": entry["seed"] + copy * size} for copy in range(copies)
         for entry in summary]))
    assembled = load_record(out / "record.json")
    kept = results_fingerprint(out, assembled, seeds=results, checkpoint_files=named).value
    whole = run_fingerprint(out, out / "record.json", assembled, checkpoint_files=named).value
    (out / FINGERPRINT_FILE).write_bytes(fingerprint_file_bytes(whole, kept))
    print(json.dumps({"assembled": str(out), "seeds": copies * size, "from": str(trained),
                      "chunks": index}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trained", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--copies", type=int, default=10)
    args = parser.parse_args()
    if args.out.exists():
        sys.exit(f"{args.out}: already exists")
    assemble(args.trained, args.out, args.copies)


if __name__ == "__main__":
    main()
