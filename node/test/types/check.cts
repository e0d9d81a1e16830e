// Compiled by `make node-lint`, never run: the CommonJS consumer's view.
import { Redlock, StaleTokenError, type Semaphore } from "redislock-native";

const rl: Redlock = new Redlock("redis://127.0.0.1:6379");
const api: Semaphore = rl.semaphore("api", 3);
export const checks = [rl, api, StaleTokenError];
