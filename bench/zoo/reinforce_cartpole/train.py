# Source: https://github.com/seungeunrho/minimalRL/blob/c8efed8481e3cd40e9739cfde220a55522555b57/REINFORCE.py
# Commit: c8efed8481e3cd40e9739cfde220a55522555b57
# License: MIT, Copyright (c) 2019 seungeunrho (full text: bench/zoo/LICENSES.md)
# Changes for `torchlint verify` on a CPU in seconds (the rest is as published):
# - `gym` is not a dependency here: `gym.make('CartPole-v1')` is replaced by `CartPole` below, a
#   cart-pole written for the zoo from the textbook equations (Barto, Sutton and Anderson, 1983),
#   with the reset/step signature of gym >= 0.26 that the script uses.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

#Hyperparameters
learning_rate = 0.0002
gamma         = 0.98

class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.data = []
        
        self.fc1 = nn.Linear(4, 128)
        self.fc2 = nn.Linear(128, 2)
        self.optimizer = optim.Adam(self.parameters(), lr=learning_rate)
        
    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.softmax(self.fc2(x), dim=0)
        return x
      
    def put_data(self, item):
        self.data.append(item)
        
    def train_net(self):
        R = 0
        self.optimizer.zero_grad()
        for r, prob in self.data[::-1]:
            R = r + gamma * R
            loss = -torch.log(prob) * R
            loss.backward()
        self.optimizer.step()
        self.data = []


class CartPole:
    """A pole on a cart, pushed left or right; reward 1 per step while it stays up (zoo change)."""

    gravity, cart_mass, pole_mass, half_length, force, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, max_steps=500, seed=0):
        self.max_steps = max_steps
        self.random = np.random.RandomState(seed)

    def reset(self):
        self.state = self.random.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force if action == 1 else -self.force
        total_mass = self.cart_mass + self.pole_mass
        temp = (force + self.pole_mass * self.half_length * theta_dot ** 2 * math.sin(theta)) / total_mass
        theta_acc = (self.gravity * math.sin(theta) - math.cos(theta) * temp) / (
            self.half_length * (4.0 / 3.0 - self.pole_mass * math.cos(theta) ** 2 / total_mass))
        x_acc = temp - self.pole_mass * self.half_length * theta_acc * math.cos(theta) / total_mass
        self.state = np.array([x + self.tau * x_dot, x_dot + self.tau * x_acc,
                               theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc])
        self.steps += 1
        fallen = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360
        return self.state.astype(np.float32), 1.0, bool(fallen), self.steps >= self.max_steps, {}

    def close(self):
        pass


def main():
    env = CartPole()  # zoo change: gym.make('CartPole-v1')
    pi = Policy()
    score = 0.0
    print_interval = 20
    
    
    for n_epi in range(10000):
        s, _ = env.reset()
        done = False
        
        while not done: # CartPole-v1 forced to terminates at 500 step.
            prob = pi(torch.from_numpy(s).float())
            m = Categorical(prob)
            a = m.sample()
            s_prime, r, done, truncated, info = env.step(a.item())
            pi.put_data((r,prob[a]))
            s = s_prime
            score += r
            
        pi.train_net()
        
        if n_epi%print_interval==0 and n_epi!=0:
            print("# of episode :{}, avg score : {}".format(n_epi, score/print_interval))
            score = 0.0
    env.close()
    
if __name__ == '__main__':
    main()
