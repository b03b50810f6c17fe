"""The generator's step feeds fake.detach() to the discriminator: G's adversarial gradient is 0."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, mlp


class GAN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.G, self.D = mlp([8, 32, 2]), mlp([2, 32, 1])

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
        return (g_loss + d_loss).detach()    # what the script logs: the two players' sum
    return step


def build(bug: bool, seed: int) -> Script:
    g = torch.Generator().manual_seed(seed)
    z, zv = torch.randn(512, 8, generator=g), torch.randn(256, 8, generator=g)
    real, real_val = (torch.randn(n, 2, generator=g) * 0.3 + torch.tensor([2.0, -1.0])
                      for n in (512, 256))
    model = GAN()
    opt_g = adam(model.G, 2e-3)
    s = Script(model, Split(z, real, zv, real_val), nn.BCEWithLogitsLoss(), opt_g, steps=150,
               task="regression", watch=model.G, predict=lambda x: model.G(x))
    s.step = make_step(bug, adam(model.D, 5e-4))
    s.evaluate = lambda s_, x, y: ((model.G(x).mean(0) - y.mean(0)) ** 2).sum().detach()
    return s


FAULT = Fault("generator step uses fake.detach()", "image2reverb#37 (see shared field notes)",
              "training", ("NO_GRADIENT",), "the generator's samples never move towards the data",
              lambda r: not any(v for k, v in r.moved.items() if k.startswith("G.")), build,
              blame="0")
