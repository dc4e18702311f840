"""CPU: reading nvidia-smi's per-process GPU memory and the process table (bench/gpu/gpuwatch.py)."""

from __future__ import annotations

import os

import gpuwatch


def test_compute_apps_csv_is_summed_per_pid_and_junk_lines_skipped() -> None:
    text = "1234, 1500\n1234, 10\n99, 42000\nNo running processes found\n[N/A], [N/A]\n"
    assert gpuwatch.parse_compute_apps(text) == {1234: 1510, 99: 42000}


def test_the_parent_pid_is_read_past_a_command_name_with_spaces_and_parens() -> None:
    assert gpuwatch.parse_stat_ppid("4242 (ray::vllm (server) x) S 777 4242 4242 0 -1") == 777


def test_this_process_is_in_the_table_with_its_parent() -> None:
    assert gpuwatch.process_parents()[os.getpid()] == os.getppid()


def test_a_process_reparented_to_init_keeps_the_parent_it_was_first_seen_with() -> None:
    watch = gpuwatch.GpuWatch()
    watch.remember_parents({12352: 900, 13066: 12352, 13760: 13066})
    watch.remember_parents({13066: 1, 13760: 13066, 14000: 1})  # the server actor ended first
    assert watch.parents == {12352: 900, 13066: 12352, 13760: 13066, 14000: 1}
