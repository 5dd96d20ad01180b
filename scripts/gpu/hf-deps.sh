#!/usr/bin/env bash
# hf_clm's datasets/evaluate for the GPU machine, which has transformers but not them. pyarrow's wheel
# (55 MB) and this repository's tree (27 MB) exceed the 64 MiB a device call carries, so `make` packs a
# pyarrow without Arrow Flight, its headers and tests, its libraries stripped (26 MB as .tar.xz),
# beside the small wheels, in .gpu/hf/ (ignored by git; carried with .gpu):
#
#   scripts/gpu/hf-deps.sh make            # here (needs pip and network or the package mirror)
#   source scripts/gpu/hf-deps.sh install  # on the GPU machine: /tmp/hf-site on PYTHONPATH
#
# datasets imports pyarrow's S3, substrait, dataset and parquet libraries (seen in /proc/self/maps
# after load_dataset("text") and map); Flight it does not.
PY_VERSION=${PY_VERSION:-3.12}                 # the GPU machine's Python (../shared/gpu/README.md)
dest=.gpu/hf
case "${1:-}" in
  make)
    set -u                                     # run, not sourced: the caller's shell keeps its options
    tmp=$(mktemp -d)
    python3 -m pip download -q --only-binary=:all: --no-deps --python-version "$PY_VERSION" --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$tmp" \
      "datasets==5.2.0" "evaluate==0.4.6" "pyarrow==26.0.1" "dill==0.4.1" "multiprocess==0.70.19" "xxhash==4.1.0" \
      || exit 1
    mkdir -p "$dest" "$tmp/pa" && rm -f "$dest"/*
    (cd "$tmp/pa" && python3 -m zipfile -e "$tmp"/pyarrow-*.whl . \
      && rm -rf pyarrow/libarrow_flight.so* pyarrow/_flight*.so pyarrow/tests pyarrow/include pyarrow/src \
      && find pyarrow -name '*.so*' -exec strip --strip-unneeded {} + ) || exit 1
    tar cf - -C "$tmp/pa" . | xz -T2 -6 > "$dest/pyarrow-slim.tar.xz"
    cp "$tmp"/*.whl "$dest/" && rm -f "$dest"/pyarrow-*.whl
    rm -rf "$tmp"
    du -sh "$dest" ;;
  install)
    mkdir -p /tmp/hf-site
    tar xJf "$dest/pyarrow-slim.tar.xz" -C /tmp/hf-site \
      && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hf-site "$dest"/*.whl \
      && export PYTHONPATH=/tmp/hf-site${PYTHONPATH:+:$PYTHONPATH} \
      && python3 -c "import datasets, evaluate, huggingface_hub; print('hf-deps: datasets', datasets.__version__, 'hub', huggingface_hub.__version__)" ;;
  *) echo "usage: scripts/gpu/hf-deps.sh make | source scripts/gpu/hf-deps.sh install" >&2; return 2 2>/dev/null || exit 2 ;;
esac
