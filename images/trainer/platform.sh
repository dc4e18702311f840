# Shared by lock.sh and .ci/check-trainer-lock: the one target the trainer image is built for.
# pip does not widen --platform to older manylinux tags, so every glibc level the image's base
# (glibc 2.36, python:3.12-slim-bookworm; 2.35 is the newest tag any locked wheel needs) accepts is listed.
ANTLR4_VERSION=4.9.3
PLATFORM_ARGS=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312)
for v in $(seq 35 -1 17); do PLATFORM_ARGS+=(--platform "manylinux_2_${v}_x86_64"); done
PLATFORM_ARGS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
