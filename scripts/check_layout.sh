#!/usr/bin/env bash
# Checks that #include "..." arrows between the module folders point down only (README "Layout"):
# each folder may include from itself and from the folders listed for it below, nothing else.
# Prints every include that breaks the rule and exits 1 if there is one. Usage:
# scripts/check_layout.sh [repo root]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# folder -> the folders its files may include from (besides itself), lowest first
declare -A allow=(
  [common]=""
  [format]="common"
  [kernels]="common format"
  [engine/backend]="common format kernels"
  [engine/models]="common format engine/backend"
  [engine/chat]="common format"
  [engine/grammar]="common format"
  [engine/sched]="common format engine/backend engine/models engine/chat engine/grammar"
  [engine/server]="common format engine/backend engine/models engine/chat engine/sched engine/grammar"
  [engine/cli]="common format engine/backend engine/models engine/chat engine/sched engine/server engine/grammar"
  [tools]="common format kernels engine/backend engine/models engine/grammar"
  [router]="common"
  [clients]="common format"
)

# the folder (a key of allow) that owns path $1, longest match first; empty if none
owner() {
  local p=$1 best="" k
  for k in "${!allow[@]}"; do
    if [[ $p == "$k"/* && ${#k} -gt ${#best} ]]; then best=$k; fi
  done
  printf '%s' "$best"
}

bad=0
while IFS= read -r line; do
  file=${line%%:*}
  inc=$(sed -E 's/^[^:]*:[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/' <<<"$line")
  from=$(owner "$file")
  to=$(owner "$inc")
  [[ -z $from || -z $to || $from == "$to" ]] && continue
  ok=0
  for a in ${allow[$from]}; do [[ $a == "$to" ]] && ok=1; done
  if [[ $ok == 0 ]]; then
    echo "layout: $file includes $inc ($from may not include from $to)"
    bad=1
  fi
done < <(find common format kernels engine tools router clients -type f \
           \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z |
         xargs -0 grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' || true)
exit $bad
