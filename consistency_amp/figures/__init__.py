"""The paper's figures and tables, drawn from the grid's stored results (Figures 1-8, Appendices C-D); imports from grid and the layers below."""
