"""`python -m consistency_amp.experiments.evaluate`: runs `python -m consistency_amp.evaluation.evaluate` under its first name (hand-written, documented and tested in nbs/74_command_aliases.ipynb)."""
if __name__ == "__main__":
    import runpy
    runpy.run_module("consistency_amp.evaluation.evaluate", run_name="__main__", alter_sys=True)
