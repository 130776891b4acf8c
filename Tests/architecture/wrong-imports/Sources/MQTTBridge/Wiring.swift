// Deliberately wrong: a door reaches up into the executables' wiring (their options).
import Launch
