"""The reward: consistency verifiers, their pairing into per-completion rewards, and its random-guesser baseline (paper Sections 3-4, Appendix A); imports only the top level."""
