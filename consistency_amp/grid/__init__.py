"""The paper's run grid: the manifest of every figure's runs, their results and status, the launcher and the registry command line; imports from evaluation and the layers below."""
