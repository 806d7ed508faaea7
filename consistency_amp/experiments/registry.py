"""`python -m consistency_amp.experiments.registry`: runs `python -m consistency_amp.grid.registry` under its first name (hand-written, documented and tested in nbs/74_command_aliases.ipynb)."""
if __name__ == "__main__":
    import runpy
    runpy.run_module("consistency_amp.grid.registry", run_name="__main__", alter_sys=True)
