"""Register-tiled schedules that compute rules emit when shapes allow: the tile machinery
(tile.py) and one module per operator family."""

from irtool.lower.schedules.conv import conv2d_nchw_tiled, conv2d_schedule
from irtool.lower.schedules.conv_channels import conv2d_channels_tiled
from irtool.lower.schedules.dense import dense_tiled
from irtool.lower.schedules.tile import RegisterTile, register_tile

__all__ = ["RegisterTile", "conv2d_channels_tiled", "conv2d_nchw_tiled", "conv2d_schedule", "dense_tiled",
           "register_tile"]
