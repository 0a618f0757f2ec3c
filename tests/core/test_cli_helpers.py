"""utils.cli helpers the stage scripts share: flag pairs and the callbacks for library steps."""

from __future__ import annotations

import argparse
import logging

from utils.cli import (
    add_aliased_arg,
    add_common_args,
    add_output_dir_arg,
    log_dir_hook,
    progress_hook,
)


def test_aliased_flags_accept_both_spellings_into_one_dest():
    parser = argparse.ArgumentParser()
    add_aliased_arg(parser, "max_samples", type=int, default=None, help="h")
    add_output_dir_arg(parser, "where")
    add_common_args(parser, workers=3, parts=True)
    for flags in (["--max-samples", "5", "--output-dir", "o", "--num-workers", "2",
                   "--total-parts", "4", "--log-level", "debug", "--no-progress"],
                  ["--max_samples", "5", "--output_dir", "o", "--num_workers", "2",
                   "--total_parts", "4", "--log_level", "debug", "--no_progress"]):
        args = parser.parse_args(flags)
        assert (args.max_samples, args.output_dir, args.num_workers, args.total_parts,
                args.log_level, args.no_progress) == (5, "o", 2, 4, "DEBUG", True)
    defaults = parser.parse_args([])
    assert (defaults.output_dir, defaults.num_workers, defaults.part) == (None, 3, None)


def test_log_dir_hook_writes_the_log_file_where_the_step_says(tmp_path):
    parser = argparse.ArgumentParser()
    add_common_args(parser)
    hook = log_dir_hook(parser.parse_args(["--no-progress"]), "step")
    log_file = hook(tmp_path / "logs")
    logging.getLogger("test_cli_helpers").info("hello")
    root = logging.getLogger()
    for handler in list(root.handlers):
        handler.close()
        root.removeHandler(handler)
    assert log_file.parent == tmp_path / "logs" and log_file.name.startswith("step_")
    assert "hello" in log_file.read_text()


def test_progress_hook_passes_every_item_through():
    assert list(progress_hook("items")(iter([1, 2, 3]), 3)) == [1, 2, 3]
