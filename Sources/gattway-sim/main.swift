print("gattway-sim")
