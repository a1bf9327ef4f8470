"""Inside the model: what a trained checkpoint computes, layer by layer and head by head.

One file per view, each a function of (model, token ids) that returns plain lists, what
`tinylm inspect VIEW --json` prints and the studio's Inside page draws:

    lens.py         logit lens: every block's residual stream read through the final norm and head
    attention.py    every head's attention pattern, its entropy, previous-/first-token and induction scores
    attribution.py  direct logit attribution: a logit split into embedding, head and MLP contributions
    patching.py     activation patching: which (layer, position), head or MLP restores a clean behaviour
    neurons.py      an MLP neuron's top-activating windows on the dev split; a token's embedding neighbours
    induction.py    induction and in-context-learning scores, over every saved checkpoint of a run

What they read from the model comes from the hooks in models/hooks/, on the model's own forward pass.
"""
