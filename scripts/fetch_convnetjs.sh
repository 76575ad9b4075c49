#!/usr/bin/env bash
# Downloads the pretrained network of ConvNetJS's CIFAR-10 demo (a net.toJSON() snapshot of the
# thesis's network) to DIR/cifar10_snapshot.json, read by `cnnrun --weights FILE.json`.
# Exits 1 without a network. Not verified here (no network on the development machines): the
# reader is tested on a snapshot written in ConvNetJS's layout from the thesis's text files.
set -euo pipefail
dir=${1:-assets}
url=https://cs.stanford.edu/people/karpathy/convnetjs/demo/cifar10_snapshot.json
out=$dir/cifar10_snapshot.json
if [[ -s "$out" ]]; then exit 0; fi
command -v curl >/dev/null || { echo "fetch: no curl" >&2; exit 1; }
mkdir -p "$dir"
if ! curl -fsSL --connect-timeout 5 --max-time 300 -o "$out.part" "$url" 2>/dev/null; then
  rm -f "$out.part"
  echo "fetch: the ConvNetJS snapshot cannot be downloaded here (no network)" >&2
  exit 1
fi
mv "$out.part" "$out"
