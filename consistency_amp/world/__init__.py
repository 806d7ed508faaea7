"""The world: Omni3D scenes (real or synthetic), the spatial tasks, the transformations T and the prompts built from them (Appendix D); imports reward and the top level."""
