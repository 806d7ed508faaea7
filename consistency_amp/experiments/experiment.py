"""`python -m consistency_amp.experiments.experiment`: runs `python -m consistency_amp.science.experiment` under its first name (hand-written, documented and tested in nbs/74_command_aliases.ipynb)."""
if __name__ == "__main__":
    import runpy
    runpy.run_module("consistency_amp.science.experiment", run_name="__main__", alter_sys=True)
