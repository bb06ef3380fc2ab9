"""Programs over a dynamic batch shared by the unit and C-link tests of native dynamic shapes
(docs/native-relay.md, "Dynamic shapes"): a dynamic-batch MLP and a recurrent cell unrolled by
tail recursion over `n` steps, in one module whose `main` returns both."""

from __future__ import annotations

MLP_AND_RNN = """#[version = "0.0.5"]
def @mlp(%x: Tensor[(?, 8), float32], %w1: Tensor[(16, 8), float32], %b1: Tensor[(16), float32],
         %w2: Tensor[(4, 16), float32]) -> Tensor[(?, 4), float32] {
  %0 = nn.dense(%x, %w1, units=16);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  nn.dense(%2, %w2, units=4)
}

def @rnn(%n: int32, %h: Tensor[(?, 16), float32], %x: Tensor[(?, 8), float32], %wx: Tensor[(16, 8), float32],
         %wh: Tensor[(16, 16), float32], %b: Tensor[(16), float32]) -> Tensor[(?, 16), float32] {
  if (%n <= 0) {
    %h
  } else {
    %3 = nn.dense(%x, %wx, units=16);
    %4 = nn.dense(%h, %wh, units=16);
    %5 = nn.bias_add(add(%3, %4), %b);
    @rnn(%n - 1, tanh(%5), %x, %wx, %wh, %b)
  }
}

def @main(%x: Tensor[(?, 8), float32], %h0: Tensor[(?, 16), float32], %w1: Tensor[(16, 8), float32],
          %b1: Tensor[(16), float32], %w2: Tensor[(4, 16), float32], %wh: Tensor[(16, 16), float32],
          %n: int32) -> (Tensor[(?, 4), float32], Tensor[(?, 16), float32]) {
  (@mlp(%x, %w1, %b1, %w2), @rnn(%n, %h0, %x, %w1, %wh, %b1))
}
"""
