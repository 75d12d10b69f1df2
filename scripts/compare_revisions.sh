#!/usr/bin/env bash
# Behaviour unchanged across a reshaping: the same saved verdicts rendered, and the same run records judged, by the
# code of an older revision and by this checkout's; every output must be byte-identical (apart from the line that
# names the output folder).
#
#   bash scripts/compare_revisions.sh OLD_REV [VERDICT.json …] [-- RECORD.json …]
#
# VERDICT.json: `specgate report` rebuilds summary.md, metrics.prom, benchmark.json (machine info aside) and the
# terminal summary from it, and the advice of its failed checks is chosen again (`specgate.checks.advice.advise`). RECORD.json: reference-mode run records (reports/runs/…), judged beside the reference by
# scripts/replay_records.py. With DIFF="BASELINE=RUN …" in the environment, each `specgate baseline diff BASELINE RUN`
# (the checks against the stored baseline) is compared too. Exit status 1 when anything differs.
set -euo pipefail
old_rev=${1:?usage: compare_revisions.sh OLD_REV [VERDICT.json …] [-- RECORD.json …]}
shift
verdicts=() records=()
while (($#)); do
  if [[ $1 == -- ]]; then shift; records=("$@"); break; fi
  verdicts+=("$(realpath "$1")"); shift
done
for i in "${!records[@]}"; do records[i]=$(realpath "${records[i]}"); done
here=$(git rev-parse --show-toplevel)
py=${PYTHON:-$here/.venv/bin/python}
work=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$here" worktree add -q --detach "$work/old" "$old_rev"
cli='import sys; from specgate.cli import main; sys.exit(main(sys.argv[1:]))'
advice='import sys; from pathlib import Path; from specgate.checks.advice import advise
from specgate.reports.document import load_document
d = load_document(Path(sys.argv[1])); print("\n".join(advise(d.checks, d.errors, d.hardware)))'
differs=0
for i in "${!verdicts[@]}"; do
  for side in old new; do
    src=$([[ $side == old ]] && echo "$work/old" || echo "$here")
    mkdir -p "$work/$side-$i"
    (cd "$src" && PYTHONPATH=$src "$py" -c "$cli" report --verdict "${verdicts[i]}" --to "$work/$side-$i" \
      --results "$work/none" | grep -v "^reports rebuilt in" > "$work/$side-$i/terminal.txt" || true)
    "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('machine_info', None); d.pop('datetime', None);
print(json.dumps(d, sort_keys=True))" "$work/$side-$i/benchmark.json" > "$work/$side-$i/benchmark.norm"
    (cd "$src" && PYTHONPATH=$src "$py" -c "$advice" "${verdicts[i]}" > "$work/$side-$i/advice.txt")
  done
  for f in summary.md metrics.prom benchmark.norm terminal.txt advice.txt; do
    if cmp -s "$work/old-$i/$f" "$work/new-$i/$f"; then echo "same  ${verdicts[i]}: $f"
    else echo "DIFF  ${verdicts[i]}: $f"; diff "$work/old-$i/$f" "$work/new-$i/$f" | head -5; differs=1; fi
  done
done
if ((${#records[@]})); then
  for side in old new; do
    src=$([[ $side == old ]] && echo "$work/old" || echo "$here")
    (cd "$src" && PYTHONPATH=$src "$py" scripts/replay_records.py "${records[@]}" > "$work/replay-$side.txt")
  done
  if cmp -s "$work/replay-old.txt" "$work/replay-new.txt"; then
    echo "same  replay_records.py on ${#records[@]} record(s): $(wc -l < "$work/replay-new.txt") lines"
  else echo "DIFF  replay_records.py"; diff "$work/replay-old.txt" "$work/replay-new.txt" | head -10; differs=1; fi
fi
for pair in ${DIFF:-}; do
  baseline=$(realpath "${pair%%=*}") record=$(realpath "${pair#*=}")
  for side in old new; do
    src=$([[ $side == old ]] && echo "$work/old" || echo "$here")
    (cd "$src" && PYTHONPATH=$src "$py" -c "$cli" baseline diff "$baseline" "$record" > "$work/diff-$side.txt" || true)
  done
  if cmp -s "$work/diff-old.txt" "$work/diff-new.txt"; then
    echo "same  baseline diff $pair: $(wc -l < "$work/diff-new.txt") lines"
  else echo "DIFF  baseline diff $pair"; diff "$work/diff-old.txt" "$work/diff-new.txt" | head -10; differs=1; fi
done
exit $differs
