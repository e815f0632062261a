# Shared by the GPU scripts; source it from the repository root:
#   . benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
# The H200 image lacks pydantic: its wheels travel in .whl/ (benchmarks/gpu/PLAN.md says how
# to make them) and are installed into /tmp/site, which goes on PYTHONPATH.
ensure_pydantic() {
  python3 -c "import pydantic" 2>/dev/null && return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    .whl/pydantic-2*.whl .whl/pydantic_core-*.whl .whl/annotated_types-0.7.0*.whl \
    .whl/typing_inspection-0.4.2*.whl || return 3
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
}
