# The one target the operator image is built for (python:3.12-slim-bookworm: glibc 2.36). pip does not
# widen --platform to older manylinux tags, so every glibc level the base accepts is listed.
PLATFORM_ARGS=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312)
for v in $(seq 36 -1 17); do PLATFORM_ARGS+=(--platform "manylinux_2_${v}_x86_64"); done
PLATFORM_ARGS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
