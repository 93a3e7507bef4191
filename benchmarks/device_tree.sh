#!/usr/bin/env bash
# What a device call sends: the tracked and the untracked-but-not-ignored files, 64 MiB with the carried
# training data. A GPU round needs neither the bundled checkpoints nor the recordings (38 MiB of the tree
# once EDSR-L landed), so `slim` takes them out of git's index and ignores them for the call: they stay on
# disk but do not travel. `restore` puts the index and .git/info/exclude back as they were. In between,
# commit only by path (git commit -m ... FILE): a plain `git commit` would record their removal.
#   bash benchmarks/device_tree.sh slim|restore|size
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=$(git rev-parse --git-path info/exclude)
begin='# >>> benchmarks/device_tree.sh slim' end='# <<< benchmarks/device_tree.sh slim'
left_behind=('checkpoints/*.safetensors' 'assets/recordings')

unslim_exclude() {
    [[ -f $exclude ]] && sed -i "\|^$begin\$|,\|^$end\$|d" "$exclude"
    return 0
}

case ${1:-} in
slim)
    unslim_exclude
    mkdir -p "$(dirname "$exclude")"
    printf '%s\n/checkpoints/*.safetensors\n/assets/recordings/\n%s\n' "$begin" "$end" >> "$exclude"
    git rm -r -q --cached --ignore-unmatch -- "${left_behind[@]}"
    ;;
restore)
    git reset -q -- "${left_behind[@]}"
    unslim_exclude
    ;;
size) ;;
*)
    echo "usage: bash benchmarks/device_tree.sh slim|restore|size" >&2
    exit 2
    ;;
esac
git ls-files -z --cached --others --exclude-standard | sort -zu |
    xargs -0 -r sh -c 'for f; do if [ -f "$f" ]; then stat -c %s -- "$f"; fi; done' sh |
    awk '{ total += $1 } END { printf "%.1f MiB would travel (tracked and untracked, not ignored; carry comes on top)\n", total / 1048576 }'
