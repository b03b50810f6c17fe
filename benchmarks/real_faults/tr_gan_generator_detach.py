"""The generator's step feeds fake.detach() to the discriminator: G's adversarial gradient is 0.

The GAN around the fault follows DCGAN's practice (Radford et al., 2016): LeakyReLU(0.2) in
the discriminator, Adam with beta1 = 0.5 and one learning rate for both players. With that,
the fixed twin's generator matches the real data (mean (2, -1), std 0.3) within 300 steps; an
earlier, unbalanced version (ReLU discriminator, its rate a quarter of the generator's) never
settled, so its "fixed" twin was itself a failing GAN.

The script records the generator's loss, the one the watched model's optimizer minimises (it
recorded the two players' sum, which no optimizer lowers). Near equilibrium that loss climbs to
ln 2 as the discriminator learns, while the generator's samples reach the data: the debugger
called the rise LR_TOO_HIGH on the fixed twin (seeds 6-9, 12, 15-17, 19 of 0-19) until a
rising loss came to be excused where the validation loss halved (here, the distance of the
samples' mean from the data's, which falls 10-1000x).
"""
import torch
from torch import nn

from .harness import Fault, Script, Split, mlp


class GAN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.G, self.D = mlp([8, 32, 2]), mlp([2, 32, 1], lambda: nn.LeakyReLU(0.2))

    def forward(self, z):
        return self.D(self.G(z))


def make_step(bug: bool, opt_d: torch.optim.Optimizer):
    bce = nn.BCEWithLogitsLoss()

    def step(s, loss_fn, z, real):
        gan = s.model
        fake = gan.G(z)
        opt_d.zero_grad()
        d_loss = bce(gan.D(real), torch.ones(len(z), 1)) + bce(gan.D(fake.detach()),
                                                             torch.zeros(len(z), 1))
        d_loss.backward()
        opt_d.step()
        s.optimizer.zero_grad()
        g_loss = loss_fn(gan.D(fake.detach() if bug else fake), torch.ones(len(z), 1))
        g_loss.backward()
        s.optimizer.step()
        return g_loss.detach()      # the watched generator's loss, what its optimizer minimises
    return step


def dcgan_adam(module: nn.Module, lr: float = 2e-3) -> torch.optim.Optimizer:
    """Adam as DCGAN trains both players: beta1 = 0.5 (momentum 0.9 chases the other player)."""
    return torch.optim.Adam(module.parameters(), lr=lr, betas=(0.5, 0.999))


def build(bug: bool, seed: int) -> Script:
    g = torch.Generator().manual_seed(seed)
    z, zv = torch.randn(512, 8, generator=g), torch.randn(256, 8, generator=g)
    real, real_val = (torch.randn(n, 2, generator=g) * 0.3 + torch.tensor([2.0, -1.0])
                      for n in (512, 256))
    model = GAN()
    opt_g = dcgan_adam(model.G)
    s = Script(model, Split(z, real, zv, real_val), nn.BCEWithLogitsLoss(), opt_g, steps=300,
               task="regression", watch=model.G, predict=lambda x: model.G(x))
    s.step = make_step(bug, dcgan_adam(model.D))
    s.evaluate = lambda s_, x, y: ((model.G(x).mean(0) - y.mean(0)) ** 2).sum().detach()
    return s


FAULT = Fault("generator step uses fake.detach()", "image2reverb#37 (see shared field notes)",
              "training", ("NO_GRADIENT",), "the generator's samples never move towards the data",
              lambda r: not any(v for k, v in r.moved.items() if k.startswith("G.")), build,
              blame="0")
