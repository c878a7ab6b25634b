# Source: https://github.com/AntixK/PyTorch-VAE/blob/a6896b944c918dd7030e7d795a8c13e5c6345ec7/models/__init__.py
# Commit: a6896b944c918dd7030e7d795a8c13e5c6345ec7
# License: Apache-2.0, Copyright Anand Krishnamoorthy Subramanian (full text: bench/zoo/LICENSES.md)
# Changes: only the VanillaVAE model is imported and registered (the zoo copies no other).
from .base import *
from .vanilla_vae import *
# from .twostage_vae import *


# Aliases
VAE = VanillaVAE
GaussianVAE = VanillaVAE

vae_models = {'VanillaVAE':VanillaVAE}
