"""Speculative decoding: drafters guess a sequence's next tokens, the speculator plans and verifies them."""
