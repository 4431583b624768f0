"""How a token is drawn: sampling parameters, the draw from a batch row's logits, output constraints."""
